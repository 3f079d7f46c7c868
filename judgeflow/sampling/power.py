"""The smallest rise in a stratum's failing rate the regression rule would
detect with 80% power at ``JUDGEFLOW_REGRESSION_ALPHA``.

The rule compares the window (``n`` judged results) with the baseline just
before it (``m``; a steady plan judges ``n`` per window, so ``m = n x
baseline / window``) and fires when the rise is significant at ``alpha``
(one-sided) and at least the rule's ``min_increase``. With the normal
approximation to that one-sided test, a rise ``d`` from a rate ``p`` is found
with power ``1 - beta`` when ``d >= (z_{1-alpha} + z_{1-beta}) * sqrt(p (1 -
p) (1/n + 1/m))``; the answer is the larger of that and ``min_increase``.
"""

from __future__ import annotations

import math
from statistics import NormalDist

POWER = 0.8


def min_detectable_rise(n: int, m: int, rate: float, *, alpha: float, power: float = POWER,
                        min_increase: float | None = None, min_samples: int = 1) -> float | None:
    """None when the window or the baseline would hold fewer than
    ``min_samples`` judged results (the rule cannot decide at all)."""
    if n < max(min_samples, 1) or m < max(min_samples, 1):
        return None
    p = min(max(rate, 0.001), 0.999)
    z = NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(power)
    rise = z * math.sqrt(p * (1 - p) * (1 / n + 1 / m))
    return max(rise, min_increase or 0.0)
