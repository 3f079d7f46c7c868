"""A rate from sampled results: a stratified estimate with a 95% interval.

Each judged result weighs ``1 / inclusion_prob`` (judgeflow/sampling/: a trace a
sample budget selected with probability 0.1 stands for 10 traces; a trace
judged without a budget, or judged in full by a backfill, weighs 1). The
results of one period and segment fall into classes, one per (night, stratum,
phase) of the sample: ``n_h`` judged of ``N_h = n_h / f_h`` traces, ``f_h``
their inclusion probability, ``p_h`` their failing share.

- The rate is ``sum(N_h p_h) / sum(N_h)``: the ratio (Hájek) estimate, the
  plain share ``bad / n`` when every weight is 1.
- Its variance is the stratified one with the finite-population correction,
  ``V = sum(W_h**2 (1 - f_h) s_h**2 / n_h)``, ``W_h = N_h / N`` and ``s_h**2``
  the class's sample variance (a sampled class with no failing, or no
  passing, result is read as half an event: it has not shown a rate of
  exactly 0): a class judged in full adds nothing.
- The interval is Wilson's on the effective size ``n* = p (1 - p) / V`` the
  variance implies; where a sampled class holds few results, or few events
  are expected, it is the exact Clopper-Pearson interval on ``n*``
  (Korn-Graubard's). Bounds are clamped to [0, 1] and hold the rate.
- A window judged in full (every weight 1) is not an estimate: its rate is
  the plain share, its interval Wilson's on ``n`` as always (what the rate
  says of the process), and the rules read the rate itself.
- ``n_eff``, what every rule's minimum-samples check reads, is Kish's
  effective size ``sum(w)**2 / sum(w**2)``: the judged count when every weight
  is 1, less when unequal weights make some results stand for many.
- The regression test (Fisher's exact, :mod:`judgeflow.alerts.stats`) runs on
  the *effective counts* ``round(rate * n_eff)`` of ``round(n_eff)``: exactly
  today's counts when every weight is 1. A regression is a question about the
  process, not this window's traffic, so it takes no finite-population correction.

Results without classes (unweighted, or weights known only by their sums, as
the trend reads them) get Wilson's interval on ``n_eff``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# the normal quantile of a two-sided 95% interval
Z95 = 1.959963984540054
ALPHA = 0.05
# below this many judged results in a sampled class, or this many expected
# events (or non-events) on n*, the interval is the exact one
SMALL_CLASS = 30
FEW_EVENTS = 5.0
# a bound this close to 0 or 1 is 0 or 1 (floating-point residue, not a figure)
_EDGE = 1e-12


@dataclass(frozen=True)
class StratumCounts:
    """One class of a period's results: ``n`` judged, ``bad`` of them failing,
    sampled with inclusion probability ``prob`` (1: judged in full)."""

    n: int
    bad: int
    prob: float = 1.0

    @property
    def weight(self) -> float:
        return 1.0 / self.prob


@dataclass(frozen=True)
class WeightedCounts:
    """What one period and segment holds: judged results counted by the rate
    (``n``), how many were bad, the sums of their weights and, when the read
    knows them, their classes (``strata``)."""

    n: int = 0
    bad: int = 0
    sum_w: float = 0.0
    sum_w_bad: float = 0.0
    sum_w2: float = 0.0
    strata: tuple[StratumCounts, ...] = ()

    @classmethod
    def unweighted(cls, n: int, bad: int) -> "WeightedCounts":
        return cls(n=n, bad=bad, sum_w=float(n), sum_w_bad=float(bad), sum_w2=float(n))

    @classmethod
    def from_strata(cls, strata: list[StratumCounts] | tuple[StratumCounts, ...]) -> "WeightedCounts":
        kept = tuple(s for s in strata if s.n > 0)
        return cls(
            n=sum(s.n for s in kept), bad=sum(s.bad for s in kept),
            sum_w=math.fsum(s.n * s.weight for s in kept), sum_w_bad=math.fsum(s.bad * s.weight for s in kept),
            sum_w2=math.fsum(s.n * s.weight**2 for s in kept), strata=kept,
        )

    @property
    def weighted(self) -> bool:
        """Whether any weight differs from 1."""
        if self.strata:
            return any(s.prob < 1.0 for s in self.strata)
        return not (self.sum_w == self.n and self.sum_w2 == self.n and self.sum_w_bad == self.bad)


@dataclass(frozen=True)
class Estimate:
    rate: float | None  # None: nothing judged
    ci_low: float | None
    ci_high: float | None
    judged: int  # results counted
    traces: float  # the traffic they stand for: the sum of their weights
    n_eff: float  # Kish's effective sample size: what the minimum-samples checks read
    eff_n: int  # effective counts for Fisher's test
    eff_bad: int
    sampled: bool = False  # some result stands for more than itself: rules decide on the interval
    interval_n: float | None = None  # the effective size the interval is computed on


def wilson(rate: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``rate`` observed over ``n``
    (which may be fractional: an effective sample size)."""
    if n <= 0:
        return 0.0, 1.0
    z2 = z * z
    centre = (rate + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(max(rate * (1 - rate) / n + z2 / (4 * n * n), 0.0))
    return max(0.0, centre - half), min(1.0, centre + half)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(bad: float, n: float, alpha: float = ALPHA) -> tuple[float, float]:
    """The exact interval of ``bad`` events in ``n`` (both may be fractional: effective counts)."""
    if n <= 0:
        return 0.0, 1.0
    bad = min(max(bad, 0.0), n)
    low = 0.0 if bad <= 0 else beta_ppf(alpha / 2, bad, n - bad + 1)
    high = 1.0 if bad >= n else beta_ppf(1 - alpha / 2, bad + 1, n - bad)
    return low, high


def _clamped(rate: float, low: float, high: float) -> tuple[float, float]:
    low = 0.0 if low < _EDGE else min(low, rate)
    high = 1.0 if high > 1.0 - _EDGE else max(high, rate)
    return low, high


def stratified_variance(strata: tuple[StratumCounts, ...], rate: float) -> float:
    """``sum(W_h**2 (1 - f_h) s_h**2 / n_h)`` (see the module doc); a class of
    one result borrows the overall rate's variance."""
    total = math.fsum(s.n * s.weight for s in strata)
    v = 0.0
    for s in strata:
        if s.prob >= 1.0 or s.n == 0:
            continue
        # a sampled class with no failing (or no passing) result has not shown a
        # rate of exactly 0 (or 1): it is read as half an event, so it still varies
        p = (s.bad + 0.5) / (s.n + 1) if s.bad in (0, s.n) else s.bad / s.n
        s2 = p * (1 - p) * s.n / (s.n - 1) if s.n > 1 else rate * (1 - rate)
        v += (s.n * s.weight / total) ** 2 * (1 - s.prob) * s2 / s.n
    return v


def rate_variance(counts: WeightedCounts) -> float:
    """The variance of :func:`estimate`'s rate of ``counts`` as an estimate of the traffic's share: 0
    when every weight is 1 (the period judged in full: the share is counted, not estimated), the
    stratified variance over the sample classes when the read knows them, else ``rate (1 - rate) /
    n_eff`` (what Wilson's interval on Kish's size assumes). The corrected rate's phase-1 term
    (judgeflow/alerts/corrected.py) reads it."""
    if counts.n == 0 or counts.sum_w <= 0 or not counts.weighted:
        return 0.0
    rate = min(1.0, max(0.0, counts.sum_w_bad / counts.sum_w))
    if counts.strata:
        return stratified_variance(counts.strata, rate)
    return rate * (1 - rate) * counts.sum_w2 / counts.sum_w**2


def _interval(counts: WeightedCounts, rate: float, n_kish: float) -> tuple[float, float, float]:
    """(low, high, the effective size they were computed on) of a stratified rate."""
    strata = counts.strata
    traffic = counts.sum_w
    v = stratified_variance(strata, rate)
    if v > 0.0 and 0.0 < rate < 1.0:
        n_star = rate * (1 - rate) / v
    else:  # no failing (or no passing) result in any sampled class: the design's size, corrected
        n_star = n_kish / max(1.0 - counts.n / traffic, 1e-9)
    n_star = min(n_star, traffic)
    small = any(s.prob < 1.0 and s.n < SMALL_CLASS for s in strata)
    if small or n_star * rate < FEW_EVENTS or n_star * (1 - rate) < FEW_EVENTS:
        low, high = clopper_pearson(rate * n_star, n_star)
    else:
        low, high = wilson(rate, n_star)
    return low, high, n_star


def estimate(counts: WeightedCounts) -> Estimate:
    """The rate of ``counts`` with its 95% interval (see the module doc)."""
    if counts.n == 0 or counts.sum_w <= 0:
        return Estimate(None, None, None, counts.n, counts.sum_w, 0.0, 0, 0)
    if not counts.weighted:
        # every weight 1: exactly the plain share and today's counts
        rate = counts.bad / counts.n
        low, high = _clamped(rate, *wilson(rate, counts.n))
        return Estimate(rate, low, high, counts.n, float(counts.n), float(counts.n), counts.n, counts.bad,
                        interval_n=float(counts.n))
    rate = min(1.0, max(0.0, counts.sum_w_bad / counts.sum_w))
    n_eff = counts.sum_w**2 / counts.sum_w2 if counts.sum_w2 > 0 else 0.0
    if counts.strata:
        low, high, n_star = _interval(counts, rate, n_eff)
    else:
        (low, high), n_star = wilson(rate, n_eff), n_eff
    low, high = _clamped(rate, low, high)
    eff_n = max(1, round(n_eff))
    return Estimate(rate, low, high, counts.n, counts.sum_w, n_eff, eff_n, min(eff_n, round(rate * eff_n)),
                    sampled=True, interval_n=n_star)
