"""How many judged results a stratum needs for its regression rule to see a
rise, and the smallest rise a given number sees, with 80% power.

The rule compares the window (``n`` judged results) with the baseline just
before it (``m``; a steady plan judges ``n`` per window, so ``m = n x
baseline / window``, ``ratio = m / n``) and fires when the rise is significant
at its alpha (one-sided) and at least the rule's ``min_increase``. A segment's
test meets ``JUDGEFLOW_REGRESSION_ALPHA`` Holm-adjusted over the rule's
segments: the strictest level any of them needs is ``alpha / tests``
(:func:`segment_alpha`), which is what a stratum is planned for.

The sample size is the usual one for comparing two proportions (normal
approximation, the null's pooled variance against the alternative's
unpooled one): a rise ``d`` from a rate ``p0`` to ``p1 = p0 + d`` is found
with power ``1 - beta`` when

    sqrt(n) * d >= z_{1-alpha} * sqrt(pbar (1 - pbar) (1 + 1/ratio))
                   + z_{1-beta} * sqrt(p1 (1 - p1) + p0 (1 - p0) / ratio),

``pbar = (p1 + ratio * p0) / (1 + ratio)`` the pooled rate.
"""

from __future__ import annotations

import math
from statistics import NormalDist

POWER = 0.8
# rates are kept inside (RATE_EDGE, 1 - RATE_EDGE): a stratum that never failed still has a variance
RATE_EDGE = 0.001


def segment_alpha(alpha: float, tests: int) -> float:
    """The level Holm's correction holds the smallest of ``tests`` p-values to:
    the strictest a segment's test meets in a family of ``tests``."""
    return alpha / max(tests, 1)


def _clamp(rate: float) -> float:
    return min(max(rate, RATE_EDGE), 1 - RATE_EDGE)


def _root_n(rate: float, rise: float, *, alpha: float, ratio: float, power: float) -> float:
    """``sqrt(n)`` needed to find ``rise`` from ``rate`` (the formula of the module doc)."""
    p0 = _clamp(rate)
    p1 = min(p0 + rise, 1 - RATE_EDGE)
    d = p1 - p0
    if d <= 0:
        return math.inf
    pbar = (p1 + ratio * p0) / (1 + ratio)
    z_a, z_b = NormalDist().inv_cdf(1 - alpha), NormalDist().inv_cdf(power)
    spread = (z_a * math.sqrt(pbar * (1 - pbar) * (1 + 1 / ratio))
              + z_b * math.sqrt(p1 * (1 - p1) + p0 * (1 - p0) / ratio))
    return spread / d


def required_n(rate: float, rise: float, *, alpha: float, ratio: float, power: float = POWER) -> int | None:
    """Judged results a window needs (with ``ratio`` times as many in the
    baseline) to find a rise of ``rise`` from ``rate`` with ``power``; None
    when there is no such rise to find (``rise`` 0, or a rate already at the top)."""
    root = _root_n(rate, rise, alpha=alpha, ratio=ratio, power=power)
    return None if math.isinf(root) else math.ceil(root**2)


def min_detectable_rise(n: int, m: int, rate: float, *, alpha: float, power: float = POWER,
                        min_increase: float | None = None, min_samples: int = 1) -> float | None:
    """The smallest rise from ``rate`` found with ``power`` by a window of
    ``n`` against a baseline of ``m``, never below the rule's ``min_increase``.
    None when the window or the baseline would hold fewer than ``min_samples``
    judged results (the rule cannot decide at all)."""
    if n < max(min_samples, 1) or m < max(min_samples, 1):
        return None
    ratio = m / n
    lo, hi = 0.0, 1 - RATE_EDGE - _clamp(rate)
    for _ in range(60):  # the sqrt(n) needed falls as the rise grows: bisect for where it meets sqrt(n)
        mid = (lo + hi) / 2
        if _root_n(rate, mid, alpha=alpha, ratio=ratio, power=power) <= math.sqrt(n):
            hi = mid
        else:
            lo = mid
    return max(hi, min_increase or 0.0)
