"""A rate from sampled results: a weighted (Hájek) estimate with a 95% interval.

Each judged result weighs ``1 / inclusion_prob`` (judgeflow/sampling/: a trace a
sample budget selected with probability 0.1 stands for 10 traces; a trace
judged without a budget weighs 1). Over a period and segment, with ``w`` the
weights of the results the rate counts and ``bad`` those that did not pass:

- the rate is ``sum(w * bad) / sum(w)``, the ratio estimator, which is the
  plain share ``bad / n`` when every weight is 1;
- its uncertainty is carried by Kish's effective sample size
  ``n_eff = sum(w)**2 / sum(w**2)`` (``n`` when the weights are equal: a
  stratum judged in full or sampled at one rate), and the interval is Wilson's
  score interval at 95% on ``n_eff``, which stays inside [0, 1] and is sound
  for a handful of events;
- the regression test (Fisher's exact, :mod:`judgeflow.alerts.stats`) runs on
  the *effective counts* ``round(rate * n_eff)`` of ``round(n_eff)``: exactly
  today's counts when every weight is 1.

The minimum-samples check of every rule counts judged results (``n``), never
the weighted total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# the normal quantile of a two-sided 95% interval
Z95 = 1.959963984540054


@dataclass(frozen=True)
class WeightedCounts:
    """What one period and segment holds: judged results counted by the rate
    (``n``), how many were bad, and the sums of their weights."""

    n: int = 0
    bad: int = 0
    sum_w: float = 0.0
    sum_w_bad: float = 0.0
    sum_w2: float = 0.0

    @classmethod
    def unweighted(cls, n: int, bad: int) -> "WeightedCounts":
        return cls(n=n, bad=bad, sum_w=float(n), sum_w_bad=float(bad), sum_w2=float(n))

    @property
    def weighted(self) -> bool:
        """Whether any weight differs from 1."""
        return not (self.sum_w == self.n and self.sum_w2 == self.n and self.sum_w_bad == self.bad)


@dataclass(frozen=True)
class Estimate:
    rate: float | None  # None: nothing judged
    ci_low: float | None
    ci_high: float | None
    judged: int  # results counted (the minimum-samples check reads this)
    traces: float  # the traffic they stand for: the sum of their weights
    n_eff: float  # Kish's effective sample size
    eff_n: int  # effective counts for Fisher's test
    eff_bad: int


def wilson(rate: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``rate`` observed over ``n``
    (which may be fractional: an effective sample size)."""
    if n <= 0:
        return 0.0, 1.0
    z2 = z * z
    centre = (rate + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(max(rate * (1 - rate) / n + z2 / (4 * n * n), 0.0))
    return max(0.0, centre - half), min(1.0, centre + half)


def estimate(counts: WeightedCounts) -> Estimate:
    """The weighted rate of ``counts`` with its 95% interval (see the module doc)."""
    if counts.n == 0 or counts.sum_w <= 0:
        return Estimate(None, None, None, counts.n, counts.sum_w, 0.0, 0, 0)
    if not counts.weighted:
        # every weight 1: exactly the plain share and today's counts
        rate = counts.bad / counts.n
        low, high = wilson(rate, counts.n)
        return Estimate(rate, low, high, counts.n, float(counts.n), float(counts.n), counts.n, counts.bad)
    rate = min(1.0, max(0.0, counts.sum_w_bad / counts.sum_w))
    n_eff = counts.sum_w**2 / counts.sum_w2 if counts.sum_w2 > 0 else 0.0
    low, high = wilson(rate, n_eff)
    eff_n = max(1, round(n_eff))
    return Estimate(rate, low, high, counts.n, counts.sum_w, n_eff, eff_n, min(eff_n, round(rate * eff_n)))
