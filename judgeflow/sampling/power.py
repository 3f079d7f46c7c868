"""How many judged results a stratum needs for its regression rule to see a
rise, and the smallest rise a given number sees, with 80% power.

The rule compares the window (``n`` judged results) with the baseline just
before it (``m``; a steady plan judges ``n`` per window, so ``m = n x
baseline / window``, ``ratio = m / n``) and fires when *both* hold: Fisher's
one-sided exact test is significant at its alpha, and the observed rise is at
least the rule's ``min_increase`` (judgeflow/alerts/lifecycle.py). A segment's
test meets ``JUDGEFLOW_REGRESSION_ALPHA`` Holm-adjusted over the rule's
segments: the strictest level any of them needs is ``alpha / tests``
(:func:`segment_alpha`), which is what a stratum is planned for.

The power is that rule's, computed exactly (:func:`rule_power`): the window's
bad count ``X ~ Binomial(n, p0 + d)`` and the baseline's ``Y ~ Binomial(m,
p0)``; for each ``x`` the rule fires for every ``y`` up to the largest that
is both significant and far enough below (both sets are ``y <= something``),
so the power is ``sum_x P(X = x) P(Y <= y*(x))``. A true rise of exactly
``min_increase`` shows an observed rise at least that large about half the
time however many results are judged, so a stratum is sized to see
``SIZED_RISE x min_increase`` with 80% power; the plan reports the smallest
rise each stratum's sample sees with 80% power (:func:`min_detectable_rise`).
"""

from __future__ import annotations

import functools
import math

from judgeflow.alerts.stats import fisher_greater

POWER = 0.8
# rates are kept inside (RATE_EDGE, 1 - RATE_EDGE): a stratum that never failed still has a variance
RATE_EDGE = 0.001
# the rise a stratum is sized to see, as a multiple of the rule's minimum (see the module doc)
SIZED_RISE = 1.5
# binomial terms further than this many standard deviations from the mean are left out (< 1e-11)
_SPAN_SD = 7.0
# the largest window sized: a rise no sample under this sees is reported as not seen
MAX_N = 200_000


def segment_alpha(alpha: float, tests: int) -> float:
    """The level Holm's correction holds the smallest of ``tests`` p-values to:
    the strictest a segment's test meets in a family of ``tests``."""
    return alpha / max(tests, 1)


def _clamp(rate: float) -> float:
    return min(max(rate, RATE_EDGE), 1 - RATE_EDGE)


def _span(n: int, p: float) -> range:
    sd = math.sqrt(n * p * (1 - p))
    return range(max(0, math.floor(n * p - _SPAN_SD * sd - 1)), min(n, math.ceil(n * p + _SPAN_SD * sd + 1)) + 1)


def _pmf(k: int, n: int, p: float) -> float:
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(p) + (n - k) * math.log1p(-p))


def rule_power(n: int, m: int, p0: float, p1: float, *, alpha: float, min_increase: float = 0.0) -> float:
    """P(the regression rule fires) with ``n`` judged in the window at rate
    ``p1`` and ``m`` in the baseline at ``p0``: Fisher's p <= ``alpha`` and
    the observed rise >= ``min_increase`` (exact; see the module doc)."""
    if n <= 0 or m <= 0:
        return 0.0
    p0, p1 = _clamp(p0), _clamp(p1)
    ys = _span(m, p0)
    cdf, acc = {}, 0.0
    for y in ys:
        acc += _pmf(y, m, p0)
        cdf[y] = min(acc, 1.0)
    y_sig = ys.start - 1  # a y known significant for the current x; the largest such grows with x
    total = 0.0
    for x in _span(n, p1):
        # observed rise >= min_increase (with the rule's epsilon), within the baseline's span
        cap = min(math.floor(m * (x / n - min_increase) + 1e-9), ys.stop - 1)
        if cap < ys.start:
            continue
        if cap > y_sig and fisher_greater(x, n, cap, m) <= alpha:
            y_sig = cap  # significant up to the rise's own limit: one test decides this x
        while y_sig < cap and fisher_greater(x, n, y_sig + 1, m) <= alpha:
            y_sig += 1
        top = min(y_sig, cap)
        if top >= ys.start:
            total += _pmf(x, n, p1) * cdf[top]
    return min(total, 1.0)


def _power_at(n: int, rate: float, rise: float, alpha: float, ratio: float, min_increase: float) -> float:
    return rule_power(n, max(1, math.ceil(n * ratio)), rate, min(_clamp(rate) + rise, 1 - RATE_EDGE),
                      alpha=alpha, min_increase=min_increase)


@functools.lru_cache(maxsize=4096)
def required_n(rate: float, rise: float, *, alpha: float, ratio: float, min_increase: float = 0.0,
               power: float = POWER) -> int | None:
    """Judged results a window needs (with ``ratio`` times as many in the
    baseline) for the rule to fire on a true rise of ``rise`` from ``rate``
    with ``power``; None when no window up to ``MAX_N`` does (no rise, a rate
    at the top, or a rise not beyond ``min_increase``)."""
    if rise <= max(min_increase, 0.0) and not (rise > 0 and min_increase <= 0):
        return None
    if _clamp(rate) + rise >= 1 - RATE_EDGE:
        return None
    hi = 8
    while _power_at(hi, rate, rise, alpha, ratio, min_increase) < power:
        if hi >= MAX_N:
            return None
        hi = min(hi * 2, MAX_N)
    lo = hi // 2 if hi > 8 else 0  # power at lo is below target (or lo is 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _power_at(mid, rate, rise, alpha, ratio, min_increase) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def min_detectable_rise(n: int, m: int, rate: float, *, alpha: float, power: float = POWER,
                        min_increase: float | None = None, min_samples: int = 1) -> float | None:
    """The smallest true rise from ``rate`` on which the rule fires with
    ``power``, a window of ``n`` against a baseline of ``m`` (always above the
    rule's ``min_increase``). None when the window or the baseline would hold
    fewer than ``min_samples`` judged results (the rule cannot decide at all),
    or when no rise up to the top is seen."""
    if n < max(min_samples, 1) or m < max(min_samples, 1):
        return None
    floor_ = min_increase or 0.0
    top = 1 - RATE_EDGE - _clamp(rate)

    def seen(d: float) -> bool:
        return rule_power(n, m, rate, _clamp(rate) + d, alpha=alpha, min_increase=floor_) >= power

    if top <= floor_ or not seen(top):
        return None
    lo, hi = floor_, top
    while hi - lo > 5e-4:  # power grows with the rise: bisect for where it meets ``power``
        mid = (lo + hi) / 2
        if seen(mid):
            hi = mid
        else:
            lo = mid
    return hi
