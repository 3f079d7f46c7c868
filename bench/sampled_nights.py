"""Simulated nights under a sample budget, judged by judgeflow's own functions.

One night: strata of unequal size, failing rate and cost per trace (long
traces cost more); the planner's allocation (judgeflow.sampling.allocation,
with its headroom for per-trace cost variation), its selection
(judgeflow.sampling.selection: the ``n`` smallest hashes), a run that claims
the selected traces in the product's order (judgeflow.sampling.order.ranked:
each stratum's minimum first, then by rank) and stops where the real
:class:`judgeflow.run.budget.RunBudget` stops it, with up to ``in_flight``
pairs judged at once (a pair is admitted while what was billed, plus the
estimates in flight, plus its own estimate fit; a pair that does not fit waits
for one in flight to finish); then a second run of the night for the traces
that arrived after the plan (selected against their stratum's probability,
``select_below``), under what the first run left of the budget; an optional
backfill of an early span; and the estimate (judgeflow.alerts.estimates) and
maximum rule (judgeflow.alerts.lifecycle) over what was judged. The bench
(bench/sampling.py) and the tests (tests/sampling/test_simulated_nights.py)
both run these.

Costs, in the words the scenarios use: a stratum's traces really cost its
``cost`` on average, each trace that times a lognormal factor of mean 1 and
log-sd ``cost_sd``; the plan and the run price a trace at ``estimate_bias``
times its stratum's mean, so "estimates 30% low" is ``estimate_bias`` 0.7
(real costs 43% above the estimate) and "real costs 30% above the estimate"
is ``estimate_bias`` 1/1.3.

What it simplifies: traces are independent Bernoulli draws at their stratum's
rate; the judge is always right and never fails; one metric, so a trace is one
pair; a pair's estimate is given to the budget directly (the product computes
it from the trace's text); pairs take exponential times to judge.
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
from judgeflow.judge.pricing import Prices
from judgeflow.model import ScoreOutcome, TraceWork
from judgeflow.run.budget import Reservation, RunBudget
from judgeflow.sampling.allocation import Detect, SamplePlan, StratumInput, allocate
from judgeflow.sampling.order import ranked
from judgeflow.sampling.planner import TOP_UP_MIN_SHARE, TOP_UP_PASSES
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
    planned: dict[str, int] = field(default_factory=dict)  # stratum -> on-time traces the plan judges
    minimum: dict[str, int] = field(default_factory=dict)  # stratum -> its minimum
    late_selected: int = 0  # late traces selected ...
    late_judged: int = 0  # ... and judged
    overrun: float = 0.0  # billed past the budget: what the pairs in flight cost beyond it

    def judged_on_time(self, stratum: str) -> int:
        return sum(1 for t in self.traces if t.stratum == stratum and not t.late and t.id in self.judged)

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


def _traffic(rng: random.Random, strata: list[Stratum], late_share: float, seed: int,
             late_factor: float = 1.0) -> list[Trace]:
    """The night's traces; the last ``late_share`` of each stratum arrive after
    the plan, failing at ``late_factor`` times the stratum's rate."""
    out = []
    for s in strata:
        late_from = round(s.size * (1 - late_share))
        out += [Trace(f"{seed}-{s.name}-{i}", s.name, rng.random() < s.rate * (late_factor if i >= late_from else 1.0),
                      i >= late_from) for i in range(s.size)]
    rng.shuffle(out)  # arrival order: strata interleaved, the late ones last
    return sorted(out, key=lambda t: t.late)


def run_night(strata: list[Stratum], *, seed: int, budget_share: float, min_samples: int = 50,
              late_share: float = 0.0, estimate_bias: float = 1.0, history_noise: float = 0.3,
              backfill: tuple[str, int] | None = None, planned_rates: dict[str, float] | None = None,
              detect: Detect | None = None, cost_sd: float = 0.0, in_flight: int = 1,
              headroom_z: float = 0.0, late_reserve: float = 0.0, late_factor: float = 1.0,
              top_up: bool = False) -> Night:
    """One night: plan over the traces that arrived in time at ``estimate_bias``
    times their stratum's mean cost (with ``headroom_z``: the plan's headroom
    for ``cost_sd``; ``late_reserve``: this share of the budget held back for
    the traces that arrive after the plan), select, judge the selection in the
    product's order under the real run budget with ``in_flight`` pairs at once,
    then the late traces selected at their stratum's probability under what is
    left; settle the weights, and optionally backfill the first ``k`` traces of
    one stratum (``backfill``). ``planned_rates``: the failing rates the plan is
    given (default: each stratum's rate with ``history_noise``); ``late_factor``:
    the late traces fail that many times as often; ``top_up``: money the run
    left is spent as the product spends it (:func:`_top_up`)."""
    rng = random.Random(seed)
    night_day = NIGHT0 + timedelta(days=seed % 3650)
    traces = _traffic(rng, strata, late_share, seed, late_factor)
    by = {s.name: s for s in strata}
    budget = budget_share * sum(s.size * s.cost for s in strata)
    on_time: dict[str, list[str]] = {s.name: [] for s in strata}
    late: dict[str, list[str]] = {s.name: [] for s in strata}
    for t in traces:
        (late if t.late else on_time)[t.stratum].append(t.id)
    noisy = {s.name: min(max(s.rate * math.exp(rng.gauss(0, history_noise)), 0.0), 1.0) for s in strata}
    plan = night_plan(strata, planned_rates or noisy, budget=budget * (1 - late_reserve), min_samples=min_samples,
                      late_share=late_share, estimate_bias=estimate_bias, detect=detect, cost_sd=cost_sd,
                      headroom_z=headroom_z)
    night = Night(traces, budget=budget, plan_cost=plan.cost_usd, planned={a.name: a.judged for a in plan.strata},
                  minimum={a.name: a.minimum for a in plan.strata})
    cost_rng = random.Random(seed * 7919 + 1)
    real = {t.id: by[t.stratum].cost * (math.exp(cost_rng.gauss(-cost_sd ** 2 / 2, cost_sd)) if cost_sd else 1.0)
            for t in traces}
    prob = {a.name: a.inclusion_prob if plan.sampled else 1.0 for a in plan.strata}
    first = [(i, NIGHT0, night_day, prob[a.name], a.name) for a in plan.strata
             for i in select(on_time[a.name], a.judged, night_day)]
    created = {t.id: t for t in traces}
    estimate_of = {t.id: by[t.stratum].cost * estimate_bias for t in traces}
    left = _judge_run(night, [k.id for k in ranked(first, min_samples)], estimate_of, real, budget, in_flight, rng)
    if top_up and plan.sampled:
        # the reserve stays for the late traces: the top-up spends only what the plan's budget left
        held = late_reserve * budget
        planned = dict(night.planned)
        for _ in range(TOP_UP_PASSES):  # as the product: while a pass selects more and money is left
            if left - held <= TOP_UP_MIN_SHARE * budget:
                break
            left = held + _top_up(night, planned, on_time, estimate_of, real, left - held, in_flight, rng,
                                  night_day, planned_rates or noisy, cost_sd, headroom_z, prob)
    chosen_late = [i for name in late for i in select_below(late[name], prob[name], night_day)]
    night.late_selected = len(chosen_late)
    second = [(i, NIGHT0, night_day, prob[created[i].stratum], created[i].stratum) for i in chosen_late]
    _judge_run(night, [k.id for k in ranked(second, min_samples)], estimate_of, real, left, in_flight, rng)
    night.late_judged = sum(1 for i in chosen_late if i in night.judged)
    night.overrun = max(night.billed - budget, 0.0)
    if backfill is not None:
        _backfill(night, *backfill)
    _settle(night)
    return night


def _top_up(night: Night, planned: dict[str, int], on_time: dict[str, list[str]], estimate_of: dict[str, float],
            real: dict[str, float], left: float, in_flight: int, rng: random.Random, night_day: date,
            rates: dict[str, float], cost_sd: float, headroom_z: float, prob: dict[str, float]) -> float:
    """What the run left is planned again at tonight's prices (what the judged
    traces billed over their estimates) over each stratum's traces not selected,
    with headroom, and the extension judged in rank order (judgeflow/sampling/planner.py's
    top-up); a stratum's selection stays the traces with the smallest keys.
    Returns what is left after it; ``planned`` (each stratum's selection) and
    ``prob`` get the strata's new counts and probabilities."""
    judged = list(night.judged)
    ratio = sum(real[i] for i in judged) / max(sum(estimate_of[i] for i in judged), 1e-12)
    cv = math.sqrt(math.exp(cost_sd ** 2) - 1)
    inputs = []
    for name, n in planned.items():
        ids = on_time[name]
        if len(ids) > n:
            mean = estimate_of[ids[0]] * ratio
            inputs.append(StratumInput(name, len(ids) - n, mean, rates[name], cost_sd=cv * mean))
    if not inputs or left <= 0:
        return left
    extra = allocate(inputs, budget_usd=left, min_samples=0, headroom_z=headroom_z)
    rows = []
    for a in extra.strata:
        before = planned[a.name]
        planned[a.name] = before + a.judged
        now = select(on_time[a.name], planned[a.name], night_day)
        prob[a.name] = len(now) / len(on_time[a.name])
        new = now - select(on_time[a.name], before, night_day)
        rows += [(i, NIGHT0, night_day, prob[a.name], a.name) for i in new]
    est = {i: estimate_of[i] * ratio for i, *_ in rows}
    return _judge_run(night, [k.id for k in ranked(rows, 0)], {**estimate_of, **est}, real, left, in_flight, rng)


class _GivenEstimates(RunBudget):
    """The run's own budget (admission, the stop, its in-run correction of the
    estimates by what finished pairs cost), with each pair's estimate given
    rather than computed from its text."""

    def __init__(self, limit_usd: float, estimates: dict[str, float]):
        super().__init__(limit_usd, Prices(0.0, 0.0, "bench"))
        self._given = estimates

    def estimate(self, work: TraceWork) -> tuple[float, float]:
        raw = self._given[work.trace_id]
        return raw, raw * self._scale()


def _judge_run(night: Night, order: list[str], estimates: dict[str, float], real: dict[str, float],
               limit: float, in_flight: int, rng: random.Random) -> float:
    """One run over ``order`` under a budget of ``limit`` (judgeflow/run/budget.py and the
    schedule's admission: a pair that does not fit waits for one in flight to finish; one that
    still does not fit, nothing in flight, ends the run); returns what it left of ``limit``."""
    budget = _GivenEstimates(limit, estimates)
    flying: list[tuple[float, str, Reservation]] = []  # (finishes at, trace id, its reservation)
    clock = 0.0

    def finish_one() -> bool:
        nonlocal clock
        if not flying:
            return False
        flying.sort()
        clock, trace_id, reservation = flying.pop(0)
        budget.close(reservation, [ScoreOutcome(trace_id=trace_id, metric="toxicity", status="scored",
                                                judge_calls=1, cost_usd=real[trace_id])])
        night.judged[trace_id] = ("sample", 1.0)
        night.billed += real[trace_id]
        return True

    for trace_id in order:
        while len(flying) >= in_flight:
            finish_one()
        work = TraceWork(trace_id=trace_id, metric="toxicity", created_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
        reservation = Reservation()
        if not budget.admit(work, reservation, finish_one) or not budget.has_room():
            break
        flying.append((clock + rng.expovariate(1.0), trace_id, reservation))
    while finish_one():
        pass
    return max(limit - budget.spent_usd, 0.0)


def night_plan(strata: list[Stratum], rates: dict[str, float], *, budget: float, min_samples: int,
               late_share: float, estimate_bias: float, detect: Detect | None = None, cost_sd: float = 0.0,
               headroom_z: float = 0.0) -> SamplePlan:
    """The planner's allocation over the traces that arrive in time (those
    :func:`_traffic` does not mark late), at ``estimate_bias`` times their mean
    cost, each trace's cost known to vary with a coefficient of variation of the
    lognormal's ``cost_sd`` (``headroom_z``: the plan's headroom for it)."""
    cv = math.sqrt(math.exp(cost_sd ** 2) - 1)
    return allocate([StratumInput(s.name, round(s.size * (1 - late_share)), s.cost * estimate_bias, rates[s.name],
                                  cost_sd=cv * s.cost * estimate_bias) for s in strata],
                    budget_usd=budget, min_samples=min_samples, detect=detect, headroom_z=headroom_z)


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


def regression_rule(min_increase: float, alpha: float, min_samples: int, baseline_nights: int) -> Rule:
    s = Settings(_env_file=None, toxicity_regression_min_increase=min_increase, regression_alpha=alpha,
                 alert_min_samples=min_samples, alert_segment_by="app", alert_window="24h",
                 regression_baseline=f"{baseline_nights}d")
    return next(r for r in all_rules(s) if r.name == "toxicity_regression")


@dataclass(frozen=True)
class Detection:
    """One night whose target stratum rose: what the plan claimed for it, and whether the rule fired."""

    target: str
    claimed: float | None  # the plan's "smallest rise detected (80% power)" for the target (None: n/a)
    rise: float  # the true rise
    planned: int  # the target's traces the plan judges
    judged: int  # ... and those the run judged (late ones included)
    fired: bool
    exact: float  # the rule's exact power at the target's true rate, for what was judged (Holm's strictest level)
    judged_on_time: int = 0  # of the target's traces the plan judged, those the run judged


def detection_night(seed: int, *, at: str = "claimed", budget_share: float = 0.12, late_share: float = 0.0,
                    estimate_bias: float = 1.0, min_increase: float = 0.05, alpha: float = 0.05,
                    min_samples: int = 50, baseline_nights: int = 7, total: int = 3000, cost_sd: float = 0.0,
                    in_flight: int = 1, headroom_z: float = 0.0, top_up: bool = False) -> Detection:
    """One night of :func:`mixed_strata` through the planner's own path: the
    plan (power step included) over rates known from history with noise; the
    claimed rise of a random target stratum as the plan's table computes it
    (judgeflow/sampling/planner.py); a baseline of ``baseline_nights`` nights
    judged at the plan's counts and the strata's true rates; then the night with
    the target risen by the claim (``at`` "claimed") or by the rule's minimum
    (``at`` "minimum"), run as :func:`run_night` runs it; the regression rule
    over overall and every stratum, Holm-adjusted as the evaluation does."""
    from judgeflow.alerts.lifecycle import correct_for_family
    from judgeflow.sampling.power import min_detectable_rise, rule_power, segment_alpha

    rng = random.Random(seed)
    strata = mixed_strata(rng, total)
    rates = {s.name: min(max(s.rate * math.exp(rng.gauss(0, 0.3)), 0.0), 1.0) for s in strata}
    budget = budget_share * sum(s.size * s.cost for s in strata)
    tests = 1 + len(strata)
    detect = Detect(min_increase, alpha, tests, baseline_nights)
    # the plan holds the late share back for the late traces (the product's late reserve, from history)
    plan = {a.name: a for a in night_plan(strata, rates, budget=budget * (1 - late_share), min_samples=min_samples,
                                          late_share=late_share, estimate_bias=estimate_bias, detect=detect,
                                          cost_sd=cost_sd, headroom_z=headroom_z).strata}
    base = {}
    for s in strata:
        a = plan[s.name]
        m = a.judged * baseline_nights
        base[s.name] = StratumCounts(m, sum(rng.random() < s.rate for _ in range(m)), a.inclusion_prob or 1.0)
    # the plan's table claims a rise from each stratum's rate over the baseline period; the target is
    # one it claims a rise for (a stratum judged fewer than the minimum samples is "n/a")
    claims = {s.name: min_detectable_rise(plan[s.name].judged, int(plan[s.name].judged * baseline_nights),
                                          base[s.name].bad / base[s.name].n if base[s.name].n else 0.05,
                                          alpha=segment_alpha(alpha, tests), min_increase=min_increase,
                                          min_samples=min_samples) for s in strata}
    target = rng.choice([s for s in strata if claims[s.name] is not None] or strata)
    planned, claimed = plan[target.name], claims[target.name]
    rise = min_increase if at == "minimum" else (claimed or 0.0)
    risen = [Stratum(s.name, s.size, min(s.rate + rise, 1.0), s.cost) if s is target else s for s in strata]
    night = run_night(risen, seed=seed, budget_share=budget_share, min_samples=min_samples, late_share=late_share,
                      estimate_bias=estimate_bias, planned_rates=rates, detect=detect, cost_sd=cost_sd,
                      in_flight=in_flight, headroom_z=headroom_z, top_up=top_up, late_reserve=late_share)
    rule = regression_rule(min_increase, alpha, min_samples, baseline_nights)
    now = datetime.now(timezone.utc)
    family = [figures_from_counts(night.counts(name), WeightedCounts.from_strata(
                  [base[n] for n in ([name] if name else sorted(base))]), failed=0, evaluated_at=now,
                  window_start=now, segment=Segment("app", name.split("=", 1)[1]) if name else OVERALL)
              for name in [None] + sorted(base)]
    figures = next(f for f in correct_for_family(rule, family) if f.segment.label == f"app={target.name[4:]}")
    _, _, transition = decide(rule, figures, state="ok", last_notified_at=None, now=now)
    judged = sum(1 for t in night.traces if t.stratum == target.name and t.id in night.judged)
    exact = rule_power(judged, base[target.name].n, target.rate, min(target.rate + rise, 1.0),
                       alpha=segment_alpha(alpha, tests), min_increase=min_increase)
    return Detection(target.name, claimed, rise, planned.judged, judged, transition == "fired", exact,
                     night.judged_on_time(target.name))
