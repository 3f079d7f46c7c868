"""How many traces of each stratum a sample budget judges.

When judging every new trace costs more than the budget ``B``:

1. **Minimums.** Each stratum gets ``min(its traces, min_samples)``
   (``JUDGEFLOW_ALERT_MIN_SAMPLES``), so every segment's rules can decide.
   When ``B`` cannot pay for all of them, the budget is spread evenly (every
   stratum is raised to the same count until the money runs out) and the
   strata left below the minimum are named, with why.
2. **Power** (with a :class:`Detect`: the regression rule's minimum rise and
   alpha). A stratum's regression rule fires on a true rise of
   ``SIZED_RISE x`` its minimum with 80% power only from a number of judged
   results that grows as its failing rate does
   (:func:`judgeflow.sampling.power.required_n`: the power of the rule that
   fires, Fisher's test at the alpha a segment's Holm-adjusted test needs
   *and* an observed rise of at least the minimum). The money left after the minimums
   raises strata to that number, cheapest first (the order that gives the
   most segments that power), while it fits; a stratum it does not reach, or
   whose whole traffic is fewer, is named, with how many it needed. A stratum
   with no recent failing rate has no such number.
3. **Cost-aware Neyman allocation** of the rest: stratum ``h`` is judged
   ``n_h = clamp(k * N_h * S_h / sqrt(c_h), floor_h, N_h)`` traces, ``N_h``
   its traffic, ``S_h = sqrt(p_h (1 - p_h))`` the standard deviation of its
   failing rate from recent history and ``c_h`` the cost of judging one of
   its traces, with ``k`` the largest that fits ``B`` (the split that
   minimises the variance for a fixed spend, kept above the floors the first
   two steps set): a stratum of long, dear traces gets fewer of them.

Integer counts: each ``n_h`` is floored, then single traces are added in the
order of the largest remainder while they fit, so the plan never exceeds ``B``.

**Headroom** (``headroom_z`` > 0): a trace's real cost varies about its
stratum's mean (``cost_sd``), so a plan that fills ``B`` at the means runs
short on about half the nights, and a run that judges every stratum's
minimum first, then by rank (judgeflow/sampling/order.py), then cuts every
stratum's sample. The plan is therefore made under the largest ``B' <= B``
whose total cost stays within ``B`` at the normal approximation of its upper
quantile: ``sum n_h c_h + z sqrt(sum n_h sd_h^2) + one trace <= B`` (the sum of
``n`` independent costs, Cochran's central limit argument for totals; the one
trace: a run stops on the first pair that no longer fits, so up to one trace's
cost is left unspent). With ``z`` 1.645 the planned counts are all judged on
about 95% of nights, and the rest of ``B`` is what the run may still spend
when costs come in low.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from judgeflow.sampling.power import POWER, SIZED_RISE, required_n, segment_alpha

# a stratum with no history, or one that never failed, still gets a share:
# its failing rate is taken to be at least this
MIN_RATE = 0.01


@dataclass(frozen=True)
class StratumInput:
    name: str
    traffic: int  # new traces in the stratum
    cost_usd: float  # estimated cost of judging one of its traces (every metric)
    fail_rate: float | None = None  # recent failing rate; None: unknown
    cost_sd: float = 0.0  # the standard deviation of one trace's real cost about ``cost_usd``

    @property
    def sd(self) -> float:
        p = min(max(self.fail_rate if self.fail_rate is not None else 0.5, MIN_RATE), 1 - MIN_RATE)
        return math.sqrt(p * (1 - p))


@dataclass(frozen=True)
class Detect:
    """What a stratum's regression rule must see: a rise of ``min_increase``,
    significant at ``alpha`` Holm-adjusted over ``tests`` segments, against a
    baseline ``ratio`` times the window."""

    min_increase: float
    alpha: float
    tests: int
    ratio: float

    @property
    def target(self) -> float:
        """The true rise a stratum is sized to see (see :mod:`judgeflow.sampling.power`)."""
        return SIZED_RISE * self.min_increase

    def needed(self, stratum: StratumInput) -> int | None:
        """Judged results the stratum needs a window (None: no recent failing rate to size it, or no rise to see)."""
        if stratum.fail_rate is None:
            return None
        return required_n(max(stratum.fail_rate, MIN_RATE), self.target, min_increase=self.min_increase,
                          alpha=segment_alpha(self.alpha, self.tests), ratio=self.ratio)


@dataclass(frozen=True)
class Allocation:
    name: str
    traffic: int
    judged: int
    cost_usd: float  # estimated cost of the judged traces
    minimum: int  # min(traffic, min_samples)
    short_reason: str | None = None  # why fewer than the minimum
    # judged results the stratum needs for its regression rule to see the minimum
    # rise with 80% power (None: not sized; it may exceed the traffic), and why it got fewer
    power_needed: int | None = None
    power_short: str | None = None

    @property
    def inclusion_prob(self) -> float:
        return self.judged / self.traffic if self.traffic else 1.0


@dataclass(frozen=True)
class SamplePlan:
    budget_usd: float | None
    full_cost_usd: float
    strata: list[Allocation]
    sampled: bool  # False: everything is judged (no budget, or it fits)
    # what the plan holds back for per-trace cost variation: B less the budget it was made under
    headroom_usd: float = 0.0

    @property
    def cost_usd(self) -> float:
        return sum(a.cost_usd for a in self.strata)

    @property
    def short(self) -> list[Allocation]:
        return [a for a in self.strata if a.short_reason]


def _fill(strata: list[StratumInput], caps: list[int], floors: list[int], budget: float,
          weight: list[float]) -> list[int]:
    """Counts between ``floors`` and ``caps``, as ``floor + k * weight`` with
    the largest ``k`` whose cost fits ``budget``, floored then topped up by
    largest remainder while a trace still fits."""
    def counts_at(k: float) -> list[float]:
        return [min(float(c), max(float(f), k * w)) for c, f, w in zip(caps, floors, weight)]

    def cost(xs: list[float]) -> float:
        return sum(x * s.cost_usd for x, s in zip(xs, strata))

    lo, hi = 0.0, 1.0
    while cost(counts_at(hi)) < budget and any(x < c for x, c in zip(counts_at(hi), caps)):
        hi *= 2
        if hi > 1e18:
            break
    for _ in range(200):
        mid = (lo + hi) / 2
        if cost(counts_at(mid)) <= budget:
            lo = mid
        else:
            hi = mid
    exact = counts_at(lo)
    counts = [int(math.floor(x + 1e-9)) for x in exact]
    spent = sum(n * s.cost_usd for n, s in zip(counts, strata))
    order = sorted(range(len(strata)), key=lambda i: (-(exact[i] - counts[i]), strata[i].name))
    for i in order:
        if counts[i] < caps[i] and spent + strata[i].cost_usd <= budget + 1e-12:
            counts[i] += 1
            spent += strata[i].cost_usd
    return counts


def _power_floors(strata: list[StratumInput], minimums: list[int], money: float,
                  detect: Detect) -> tuple[list[int], list[int | None]]:
    """The floors after step 2: each stratum's power target where ``money``
    (what is left after the minimums) reaches it, cheapest first; and the targets."""
    targets = [None if (n := detect.needed(s)) is None else min(s.traffic, max(n, m))
               for s, m in zip(strata, minimums)]
    floors = list(minimums)
    extra = {i: (t - minimums[i]) * strata[i].cost_usd for i, t in enumerate(targets) if t is not None}
    for i in sorted(extra, key=lambda i: (extra[i], strata[i].name)):
        if extra[i] > money + 1e-12:
            break
        floors[i], money = targets[i], money - extra[i]
    return floors, targets


def upper_cost(strata: list[StratumInput], counts: list[int], z: float) -> float:
    """The cost of judging ``counts`` traces of ``strata`` at the normal
    approximation of its upper ``z`` quantile, plus one trace (the module doc)."""
    if z <= 0:
        return sum(n * s.cost_usd for n, s in zip(counts, strata))
    mean = sum(n * s.cost_usd for n, s in zip(counts, strata))
    sd = math.sqrt(sum(n * s.cost_sd ** 2 for n, s in zip(counts, strata)))
    one = max((s.cost_usd + z * s.cost_sd for n, s in zip(counts, strata) if n), default=0.0)
    return mean + z * sd + one


def allocate(strata: list[StratumInput], *, budget_usd: float | None, min_samples: int,
             detect: Detect | None = None, headroom_z: float = 0.0) -> SamplePlan:
    """The plan for one night (see the module doc); without ``detect`` no power
    step; with ``headroom_z`` the plan's upper cost quantile fits ``budget_usd``."""
    strata = sorted(strata, key=lambda s: s.name)
    full = sum(s.traffic * s.cost_usd for s in strata)
    if budget_usd is None or upper_cost(strata, [s.traffic for s in strata], headroom_z) <= budget_usd:
        minimums = [min(s.traffic, min_samples) for s in strata]
        return SamplePlan(budget_usd, full, [
            Allocation(s.name, s.traffic, s.traffic, s.traffic * s.cost_usd, m) for s, m in zip(strata, minimums)
        ], sampled=False)
    if headroom_z <= 0:
        return _allocate_within(strata, budget_usd, min_samples, detect, budget_usd)
    # the largest budget to plan under whose plan fits ``budget_usd`` at its upper quantile
    lo, hi = 0.0, budget_usd
    best = _allocate_within(strata, 0.0, min_samples, detect, budget_usd)
    for _ in range(40):
        mid = (lo + hi) / 2
        plan = _allocate_within(strata, mid, min_samples, detect, budget_usd)
        if upper_cost(strata, [a.judged for a in plan.strata], headroom_z) <= budget_usd:
            lo, best = mid, plan
        else:
            hi = mid
        if hi - lo <= 1e-6 * budget_usd:
            break
    return replace(best, budget_usd=budget_usd, headroom_usd=budget_usd - lo)


def _allocate_within(strata: list[StratumInput], budget_usd: float, min_samples: int,
                     detect: Detect | None, said_usd: float) -> SamplePlan:
    """The plan at the means under ``budget_usd`` (steps 1-3 of the module doc);
    ``strata`` sorted by name; ``said_usd``: the budget a short stratum's reason names."""
    full = sum(s.traffic * s.cost_usd for s in strata)
    minimums = [min(s.traffic, min_samples) for s in strata]
    min_cost = sum(m * s.cost_usd for m, s in zip(minimums, strata))
    if min_cost > budget_usd:
        # every stratum raised to the same count, as far as the money goes
        counts = _fill(strata, minimums, [0] * len(strata), budget_usd, [1.0] * len(strata))
        reason = (f"the sample budget ${said_usd:.4f} cannot pay for every stratum's minimum of {min_samples} "
                  f"(${min_cost:.4f}" + (f" and the headroom for its costs' variation" if said_usd > budget_usd else "")
                  + "); it was spread evenly over the strata")
        targets: list[int | None] = [None] * len(strata)
    else:
        floors, targets = minimums, [None] * len(strata)
        if detect is not None:
            floors, targets = _power_floors(strata, minimums, budget_usd - min_cost, detect)
        counts = _fill(strata, [s.traffic for s in strata], floors, budget_usd,
                       [s.traffic * s.sd / math.sqrt(max(s.cost_usd, 1e-12)) for s in strata])
        reason = None
    needs = [None if detect is None or t is None else detect.needed(s) for s, t in zip(strata, targets)]
    allocations = [
        Allocation(s.name, s.traffic, n, n * s.cost_usd, m, reason if n < m else None, need,
                   _power_short(detect, s, n, need))
        for s, n, m, need in zip(strata, counts, minimums, needs)
    ]
    return SamplePlan(budget_usd, full, allocations, sampled=True)


def _power_short(detect: Detect | None, stratum: StratumInput, judged: int, needed: int | None) -> str | None:
    if detect is None or needed is None or judged >= needed:
        return None
    wanted = (f"{needed} judged results are needed to see a rise of {detect.target * 100:.1f} pts "
              f"with {POWER:.0%} power (the rule pages from {detect.min_increase * 100:.1f})")
    if judged >= stratum.traffic:
        return f"{wanted}; the stratum has only {stratum.traffic} new traces, all judged"
    return f"{wanted}; the sample budget left after the cheaper strata could not pay for them"
