"""The maths of `judgeflow labels sample` and `judgeflow labels plan`: pure, no I/O.

**The draw.** A stratified simple random sample without replacement of a metric's scored results,
the strata being the judge's verdict (``fail``: it did not pass, ``pass``). Allocation
(:func:`allocate`): each verdict gets half of ``n`` (the rarer verdict the odd one), capped at its
size; what a cap leaves goes to the other verdict. The rarer verdict is so oversampled, and every
result of stratum h has the known inclusion probability ``n_h / N_h``. ``n`` at or above the population
draws every result (probability 1).

**The plan.** The corrected rate's stratified variance, per verdict stratum h:
``W_h^2 p_h (1 - p_h) / n_h`` with ``W_h = N_h / N`` (the weighted share of the results: a sampled
night's result counts its weight) and ``p_h`` the share of the stratum's labels where the person says
it fails. ``p_h`` is the Beta(1, 1) prior's posterior mean, ``(fails + 1) / (labels + 2)``: 0.5 (the
worst case) with no labels, and never 0 or 1 after a few labels that all agree. No finite population
correction (it would only shrink the figure; populations are usually far larger than the labels).
Extra labels are allocated Neyman-optimally (the final ``n_h`` proportional to ``W_h sqrt(p_h (1 - p_h))``),
never taking away labels a stratum already has. It ignores the spread of result weights within a
stratum and how the estimator combines several draws: a planning figure, not the interval itself.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence, TypeVar

from judgeflow.db.labels import FAIL, PASS  # noqa: F401  (the strata, re-exported for callers)

U = TypeVar("U")


def allocate(n: int, populations: dict[str, int]) -> dict[str, int]:
    """``{stratum: n_h}``: half of ``n`` to each verdict (the rarer the odd one), capped at its size,
    the remainder to the other."""
    if n >= sum(populations.values()):
        return dict(populations)
    rare, common = sorted(populations, key=lambda s: (populations[s], s))
    wanted = {rare: n - n // 2, common: n // 2}
    rare_n = min(wanted[rare], populations[rare])
    common_n = min(n - rare_n, populations[common])
    return {rare: rare_n, common: common_n}


def inclusion_prob(drawn: int, population: int) -> float:
    return drawn / population if population else 0.0


def draw(strata: dict[str, Sequence[U]], n: int, rng: random.Random) -> tuple[dict[str, int], list[tuple[U, str]]]:
    """The allocation and the drawn ``(unit, stratum)`` in a random order, strata mixed (so labellers
    are not led). ``strata``' units must come in a fixed order (by id) for a seed to repeat a draw."""
    sizes = allocate(n, {name: len(units) for name, units in strata.items()})
    picked = [(unit, name) for name in sorted(strata) for unit in rng.sample(list(strata[name]), sizes[name])]
    rng.shuffle(picked)
    return sizes, picked


@dataclass(frozen=True)
class StratumPlan:
    name: str
    weight: float  # W_h
    labels: int  # n_h so far
    fails: int  # of them, labelled as failing
    p: float  # the Beta(1,1) posterior mean
    more: int  # labels to add

    def as_json(self) -> dict:
        return {"stratum": self.name, "weight": self.weight, "labels": self.labels, "labelled_fail": self.fails,
                "p_fail": self.p, "more": self.more}


@dataclass(frozen=True)
class LabelPlan:
    half_width: float  # the target
    confidence: float
    strata: list[StratumPlan]
    current_half_width: float | None  # None: a stratum with results has no label yet

    @property
    def more(self) -> int:
        return sum(s.more for s in self.strata)

    def as_json(self) -> dict:
        return {"target_half_width": self.half_width, "confidence": self.confidence, "more": self.more,
                "current_half_width": self.current_half_width, "strata": [s.as_json() for s in self.strata],
                "prior": PRIOR}


PRIOR = "Beta(1,1): p_h = (fails + 1) / (labels + 2); 0.5 with no labels"


def half_width(strata: Sequence[tuple[float, float, int]], confidence: float) -> float | None:
    """z * sqrt(sum W_h^2 p_h (1 - p_h) / n_h) over ``(W_h, p_h, n_h)``; None when a stratum with
    weight has no labels."""
    variance = 0.0
    for weight, p, n in strata:
        if weight == 0:
            continue
        if n == 0:
            return None
        variance += weight ** 2 * p * (1 - p) / n
    return _z(confidence) * math.sqrt(variance)


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def plan(weights: dict[str, float], labelled: dict[str, tuple[int, int]], *, half_width_target: float,
         confidence: float = 0.95) -> LabelPlan:
    """Labels to add per stratum to reach ``half_width_target``. ``weights``: ``{stratum: N_h}`` (the
    weighted result counts); ``labelled``: ``{stratum: (labels, fails)}`` so far."""
    total = sum(weights.values())
    names = sorted(weights)
    w = {h: (weights[h] / total if total else 0.0) for h in names}
    n = {h: labelled.get(h, (0, 0))[0] for h in names}
    fails = {h: labelled.get(h, (0, 0))[1] for h in names}
    p = {h: (fails[h] + 1) / (n[h] + 2) for h in names}
    s = {h: w[h] * math.sqrt(p[h] * (1 - p[h])) for h in names}  # W_h S_h
    target_var = (half_width_target / _z(confidence)) ** 2
    final = _neyman(s, n, target_var)
    strata = [StratumPlan(h, w[h], n[h], fails[h], p[h], max(0, math.ceil(final[h] - 1e-9) - n[h])) for h in names]
    current = half_width([(w[h], p[h], n[h]) for h in names], confidence)
    return LabelPlan(half_width_target, confidence, strata, current)


def _neyman(s: dict[str, float], have: dict[str, int], target_var: float) -> dict[str, float]:
    """The final labels per stratum, proportional to W_h S_h, with sum of (W_h S_h)^2 / n_h at the target,
    a stratum already past its share keeping its labels (and its variance taken off the target)."""
    free = {h for h in s if s[h] > 0}
    fixed: dict[str, float] = {h: float(have[h]) for h in s if h not in free}
    while free:
        room = target_var - sum(s[h] ** 2 / fixed[h] for h in fixed if s[h] > 0)
        if room <= 0:  # the strata kept already exceed the target: impossible without them growing too
            room = 1e-12
        total = sum(s[h] for h in free) ** 2 / room
        share = {h: total * s[h] / sum(s[x] for x in free) for h in free}
        over = {h for h in free if share[h] < have[h]}
        if not over:
            fixed.update(share)
            break
        for h in over:
            fixed[h] = float(have[h])
        free -= over
    return fixed
