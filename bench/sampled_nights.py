"""Simulated nights under a sample budget, judged by judgeflow's own functions.

One night: strata of unequal size, failing rate and cost per trace (long
traces cost more); the planner's allocation (judgeflow.sampling.allocation),
its selection (judgeflow.sampling.selection: the ``n`` smallest hashes, and
late traces against the stratum's probability), a stop at the budget the way
the run stops (no trace starts once what was billed plus its estimate would
pass the budget; actual costs differ from the estimates), an optional backfill
of an early span, and the estimate (judgeflow.alerts.estimates) and maximum
rule (judgeflow.alerts.lifecycle) over what was judged. The bench
(bench/sampling.py) and the tests (tests/sampling/test_simulated_nights.py)
both run these.

What it simplifies: traces are independent Bernoulli draws at their stratum's
rate; the judge is always right and never fails; one metric.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

from judgeflow.alerts.estimates import Estimate, StratumCounts, WeightedCounts, estimate
from judgeflow.alerts.evaluation import OVERALL, Segment, figures_from_counts
from judgeflow.alerts.lifecycle import decide
from judgeflow.alerts.rules import Rule, all_rules
from judgeflow.config.settings import Settings
from judgeflow.sampling.allocation import StratumInput, allocate
from judgeflow.sampling.selection import select, select_below

NIGHT0 = date(2026, 1, 1)
SHORT, LONG = 0.001, 0.004  # USD per trace: a short and a ~4x longer trace


@dataclass(frozen=True)
class Stratum:
    name: str
    size: int
    rate: float
    cost: float  # what judging one of its traces really costs


@dataclass
class Trace:
    id: str
    stratum: str
    bad: bool
    late: bool = False


@dataclass
class Night:
    """What one simulated night judged, and what it cost."""

    traces: list[Trace]
    judged: dict[str, tuple[str, float]] = field(default_factory=dict)  # id -> (phase, inclusion probability)
    billed: float = 0.0
    budget: float = 0.0
    plan_cost: float = 0.0

    def truth(self, stratum: str | None = None) -> float:
        rows = [t for t in self.traces if stratum is None or t.stratum == stratum]
        return sum(t.bad for t in rows) / len(rows)

    def counts(self, stratum: str | None = None) -> WeightedCounts:
        """The judged results as the alert read would class them: per (stratum, phase, probability)."""
        classes: dict[tuple[str, str, float], list[int]] = {}
        for t in self.traces:
            if t.id in self.judged and (stratum is None or t.stratum == stratum):
                phase, prob = self.judged[t.id]
                c = classes.setdefault((t.stratum, phase, prob), [0, 0])
                c[0], c[1] = c[0] + 1, c[1] + t.bad
        return WeightedCounts.from_strata([StratumCounts(n, b, p) for (_, _, p), (n, b) in sorted(classes.items())])

    def full_counts(self, stratum: str | None = None) -> WeightedCounts:
        rows = [t for t in self.traces if stratum is None or t.stratum == stratum]
        return WeightedCounts.unweighted(len(rows), sum(t.bad for t in rows))


def mixed_strata(rng: random.Random, total: int) -> list[Stratum]:
    """6-10 strata of 0.5-50% of the traffic, failing 0.5-40%, short or long traces."""
    k = rng.randint(6, 10)
    while True:
        shares = [math.exp(rng.uniform(math.log(0.005), math.log(0.5))) for _ in range(k)]
        shares = [s / sum(shares) for s in shares]
        if all(0.005 <= s <= 0.5 for s in shares):
            break
    return [Stratum(f"app=s{i}", max(2, round(s * total)), math.exp(rng.uniform(math.log(0.005), math.log(0.4))),
                    rng.choice((SHORT, LONG))) for i, s in enumerate(shares)]


def quiet_strata(total: int, rate: float = 0.03) -> list[Stratum]:
    """Six apps, every one failing at ``rate``: a maximum rule above it should stay quiet."""
    shares = (0.40, 0.25, 0.15, 0.10, 0.06, 0.04)
    return [Stratum(f"app=a{i}", round(s * total), rate, LONG if i % 2 else SHORT) for i, s in enumerate(shares)]


def _traffic(rng: random.Random, strata: list[Stratum], late_share: float, seed: int) -> list[Trace]:
    out = []
    for s in strata:
        late_from = round(s.size * (1 - late_share))
        out += [Trace(f"{seed}-{s.name}-{i}", s.name, rng.random() < s.rate, i >= late_from) for i in range(s.size)]
    rng.shuffle(out)  # arrival order: strata interleaved, the late ones last
    return sorted(out, key=lambda t: t.late)


def run_night(strata: list[Stratum], *, seed: int, budget_share: float, min_samples: int = 50,
              late_share: float = 0.0, estimate_bias: float = 1.0, history_noise: float = 0.3,
              backfill: tuple[str, int] | None = None) -> Night:
    """One night: plan over the traces that arrived in time at ``estimate_bias``
    times their real cost, select, add the late ones at their stratum's
    probability, judge in arrival order until the budget stops the run, settle
    the weights, and optionally backfill the first ``k`` traces of one stratum
    (``backfill``)."""
    rng = random.Random(seed)
    night_day = NIGHT0 + timedelta(days=seed % 3650)
    traces = _traffic(rng, strata, late_share, seed)
    by = {s.name: s for s in strata}
    budget = budget_share * sum(s.size * s.cost for s in strata)
    on_time: dict[str, list[str]] = {s.name: [] for s in strata}
    late: dict[str, list[str]] = {s.name: [] for s in strata}
    for t in traces:
        (late if t.late else on_time)[t.stratum].append(t.id)
    inputs = [StratumInput(s.name, len(on_time[s.name]), s.cost * estimate_bias,
                           min(max(s.rate * math.exp(rng.gauss(0, history_noise)), 0.0), 1.0)) for s in strata]
    plan = allocate(inputs, budget_usd=budget, min_samples=min_samples)
    night = Night(traces, budget=budget, plan_cost=plan.cost_usd)
    chosen: set[str] = set()
    for a in plan.strata:
        chosen |= select(on_time[a.name], a.judged, night_day)
        chosen |= select_below(late[a.name], a.inclusion_prob if plan.sampled else 1.0, night_day)
    for t in traces:  # the run: a trace starts only while the bill plus its estimate stays within the budget
        if t.id in chosen and night.billed + by[t.stratum].cost * estimate_bias <= budget + 1e-12:
            night.judged[t.id] = ("sample", 1.0)
            night.billed += by[t.stratum].cost
    if backfill is not None:
        _backfill(night, *backfill)
    _settle(night)
    return night


def _settle(night: Night) -> None:
    """judgeflow.sampling.decisions.settle: a stratum's sample phase weighs its traces over those judged."""
    population: dict[str, int] = {}
    judged: dict[str, int] = {}
    for t in night.traces:
        phase = night.judged.get(t.id, ("sample", 0.0))[0]
        if phase == "sample":
            population[t.stratum] = population.get(t.stratum, 0) + 1
            judged[t.stratum] = judged.get(t.stratum, 0) + (t.id in night.judged)
    for t in night.traces:
        if t.id in night.judged and night.judged[t.id][0] == "sample":
            night.judged[t.id] = ("sample", judged[t.stratum] / population[t.stratum])


def _backfill(night: Night, stratum: str, first: int) -> None:
    """Judge the first ``first`` traces of ``stratum`` in full: they, and the
    sampled ones among them, become the stratum's certainty phase
    (judgeflow.sampling.decisions.reweigh); the rest stay a sample."""
    span = sorted((t for t in night.traces if t.stratum == stratum), key=lambda t: int(t.id.rsplit("-", 1)[1]))
    for t in span[:first]:
        night.judged[t.id] = ("certainty", 1.0)


def maximum_rule(maximum: float = 0.05, min_samples: int = 50) -> Rule:
    s = Settings(_env_file=None, toxicity_rate_max=maximum, alert_min_samples=min_samples, alert_segment_by="app")
    return next(r for r in all_rules(s) if r.name == "toxicity_rate")


def pages(rule: Rule, night: Night, *, full: bool) -> list[str]:
    """The (overall and per-app) maximum pages the night fires from a quiet state."""
    now = datetime.now(timezone.utc)
    out = []
    for name in [None] + sorted({t.stratum for t in night.traces}):
        counts = night.full_counts(name) if full else night.counts(name)
        segment = OVERALL if name is None else Segment("app", name.split("=", 1)[1])
        f = figures_from_counts(counts, WeightedCounts(), failed=0, evaluated_at=now, window_start=now,
                                segment=segment)
        _, _, transition = decide(rule, f, state="ok", last_notified_at=None, now=now)
        if transition == "fired":
            out.append(name or "overall")
    return out


def covered(e: Estimate, truth: float) -> bool:
    return e.rate is not None and e.ci_low <= truth <= e.ci_high
