"""How many traces of each stratum a sample budget judges.

When judging every new trace costs more than the budget ``B``:

1. **Minimums.** Each stratum gets ``min(its traces, min_samples)``
   (``JUDGEFLOW_ALERT_MIN_SAMPLES``), so every segment's rules can decide.
   When ``B`` cannot pay for all of them, the budget is spread evenly (every
   stratum is raised to the same count until the money runs out) and the
   strata left below the minimum are named, with why.
2. **Neyman allocation** of the rest: stratum ``h`` is judged
   ``n_h = clamp(k * N_h * S_h, minimum_h, N_h)`` traces, ``N_h`` its
   traffic and ``S_h = sqrt(p_h (1 - p_h))`` the standard deviation of its
   failing rate from recent history, with ``k`` the largest that fits ``B``
   (the variance-minimising split for a fixed total, kept above the minimums).

Integer counts: each ``n_h`` is floored, then single traces are added in the
order of the largest remainder while they fit, so the plan never exceeds ``B``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# a stratum with no history, or one that never failed, still gets a share:
# its failing rate is taken to be at least this
MIN_RATE = 0.01


@dataclass(frozen=True)
class StratumInput:
    name: str
    traffic: int  # new traces in the stratum
    cost_usd: float  # estimated cost of judging one of its traces (every metric)
    fail_rate: float | None = None  # recent failing rate; None: unknown

    @property
    def sd(self) -> float:
        p = min(max(self.fail_rate if self.fail_rate is not None else 0.5, MIN_RATE), 1 - MIN_RATE)
        return math.sqrt(p * (1 - p))


@dataclass(frozen=True)
class Allocation:
    name: str
    traffic: int
    judged: int
    cost_usd: float  # estimated cost of the judged traces
    minimum: int  # min(traffic, min_samples)
    short_reason: str | None = None  # why fewer than the minimum

    @property
    def inclusion_prob(self) -> float:
        return self.judged / self.traffic if self.traffic else 1.0


@dataclass(frozen=True)
class SamplePlan:
    budget_usd: float | None
    full_cost_usd: float
    strata: list[Allocation]
    sampled: bool  # False: everything is judged (no budget, or it fits)

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


def allocate(strata: list[StratumInput], *, budget_usd: float | None, min_samples: int) -> SamplePlan:
    """The plan for one night (see the module doc)."""
    strata = sorted(strata, key=lambda s: s.name)
    full = sum(s.traffic * s.cost_usd for s in strata)
    minimums = [min(s.traffic, min_samples) for s in strata]
    if budget_usd is None or full <= budget_usd:
        return SamplePlan(budget_usd, full, [
            Allocation(s.name, s.traffic, s.traffic, s.traffic * s.cost_usd, m) for s, m in zip(strata, minimums)
        ], sampled=False)
    min_cost = sum(m * s.cost_usd for m, s in zip(minimums, strata))
    if min_cost > budget_usd:
        # every stratum raised to the same count, as far as the money goes
        counts = _fill(strata, minimums, [0] * len(strata), budget_usd, [1.0] * len(strata))
        reason = (f"the sample budget ${budget_usd:.4f} cannot pay for every stratum's minimum of {min_samples} "
                  f"(${min_cost:.4f}); it was spread evenly over the strata")
    else:
        counts = _fill(strata, [s.traffic for s in strata], minimums, budget_usd,
                       [s.traffic * s.sd for s in strata])
        reason = None
    allocations = [
        Allocation(s.name, s.traffic, n, n * s.cost_usd, m, reason if n < m else None)
        for s, n, m in zip(strata, counts, minimums)
    ]
    return SamplePlan(budget_usd, full, allocations, sampled=True)
