"""How far two judges agree on the same traces: the pure statistics.

Both judges decided pass/fail on the same pairs, so the comparisons are paired:

* **Cohen's kappa** of the pass/fail decisions, with the large-sample standard
  error of Cohen (1960), ``sqrt(po (1 - po) / (n (1 - pe)^2))``, and a 95%
  normal interval clipped to [-1, 1];
* the **failing rates** under each judge and their **difference**
  (candidate minus current) ``(b - c) / n``, where ``b`` pairs fail only under
  the candidate and ``c`` only under the current judge, with the Agresti-Min
  (2005) 95% interval for a difference of paired proportions: the Wald
  interval ``d +- z sqrt(b + c - (b - c)^2 / n) / n`` computed with half a pair
  added to each cell (``n + 2``), so a segment where the judges never
  disagree (``b = c = 0``) does not get a zero-width interval;
* the **mean score difference** (candidate minus current) with a 95% normal
  interval from the differences' sample standard deviation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def as_json(self) -> list[float]:
        return [self.low, self.high]


@dataclass(frozen=True)
class Confusion:
    """Pass/fail of the same pairs: ``both_pass``, ``only_candidate_fails`` (b),
    ``only_current_fails`` (c), ``both_fail``."""

    both_pass: int = 0
    only_candidate_fails: int = 0
    only_current_fails: int = 0
    both_fail: int = 0

    @classmethod
    def of(cls, decisions: list[tuple[bool, bool]]) -> "Confusion":
        """From (current fails, candidate fails) per pair."""
        counts = {(False, False): 0, (False, True): 0, (True, False): 0, (True, True): 0}
        for pair in decisions:
            counts[(bool(pair[0]), bool(pair[1]))] += 1
        return cls(counts[(False, False)], counts[(False, True)], counts[(True, False)], counts[(True, True)])

    @property
    def n(self) -> int:
        return self.both_pass + self.only_candidate_fails + self.only_current_fails + self.both_fail

    @property
    def current_failing(self) -> int:
        return self.only_current_fails + self.both_fail

    @property
    def candidate_failing(self) -> int:
        return self.only_candidate_fails + self.both_fail

    def as_json(self) -> dict[str, int]:
        return {
            "both_pass": self.both_pass, "only_candidate_fails": self.only_candidate_fails,
            "only_current_fails": self.only_current_fails, "both_fail": self.both_fail,
        }


def _clip(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def kappa(c: Confusion) -> tuple[float | None, Interval | None]:
    """Cohen's kappa and its 95% interval; (None, None) without pairs or when
    chance agreement is total (both judges gave one class only: kappa is undefined)."""
    n = c.n
    if n == 0:
        return None, None
    po = (c.both_pass + c.both_fail) / n
    current_pass, candidate_pass = (c.both_pass + c.only_candidate_fails) / n, (c.both_pass + c.only_current_fails) / n
    pe = current_pass * candidate_pass + (1 - current_pass) * (1 - candidate_pass)
    if pe >= 1.0:
        return None, None
    k = (po - pe) / (1 - pe)
    se = math.sqrt(po * (1 - po) / (n * (1 - pe) ** 2))
    return k, Interval(_clip(k - Z95 * se, -1.0, 1.0), _clip(k + Z95 * se, -1.0, 1.0))


def rate_difference(c: Confusion) -> tuple[float | None, Interval | None]:
    """Candidate's failing rate minus the current judge's, and its 95% interval (paired)."""
    n = c.n
    if n == 0:
        return None, None
    b, cc = c.only_candidate_fails, c.only_current_fails
    d = (b - cc) / n
    b2, c2, n2 = b + 0.5, cc + 0.5, n + 2  # Agresti-Min: half a pair more in each cell
    d2 = (b2 - c2) / n2
    se = math.sqrt(max(0.0, b2 + c2 - (b2 - c2) ** 2 / n2)) / n2
    return d, Interval(_clip(d2 - Z95 * se, -1.0, 1.0), _clip(d2 + Z95 * se, -1.0, 1.0))


def mean_difference(differences: list[float]) -> tuple[float | None, Interval | None]:
    """Mean of ``differences`` and its 95% normal interval (None without two values)."""
    n = len(differences)
    if n == 0:
        return None, None
    mean = math.fsum(differences) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in differences) / (n - 1))
    half = Z95 * sd / math.sqrt(n)
    return mean, Interval(mean - half, mean + half)
