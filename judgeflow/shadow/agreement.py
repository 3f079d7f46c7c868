"""How far two judges agree on the same traces: the pure statistics.

Both judges decided pass/fail on the same pairs, so the comparisons are paired:

* **Cohen's kappa** of the pass/fail decisions, with the large-sample variance
  of Fleiss, Cohen and Everitt (1969) and a 95% normal interval clipped to
  [-1, 1]. Kappa is undefined where a judge gives one class only (a judge that
  never fails makes kappa 0 whatever the other does): ``kappa_undefined`` says
  which case it is;
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


def kappa_undefined(c: Confusion) -> str | None:
    """Why kappa has no value for ``c`` (a judge's pass/fail marginal is degenerate), or None."""
    if c.n == 0:
        return "undefined: no pairs"
    degenerate = {
        "the current judge": {0: "never fails", c.n: "always fails"}.get(c.current_failing),
        "the candidate": {0: "never fails", c.n: "always fails"}.get(c.candidate_failing),
    }
    if all(degenerate.values()):
        same = len(set(degenerate.values())) == 1
        if same:
            return "undefined: neither judge fails" if c.current_failing == 0 else "undefined: both judges always fail"
        return "undefined: one judge never fails, the other always fails"
    for judge, how in degenerate.items():
        if how:
            return f"undefined: one judge {how} ({judge})"
    return None


def kappa(c: Confusion) -> tuple[float | None, Interval | None]:
    """Cohen's kappa and its 95% interval (Fleiss-Cohen-Everitt variance); (None, None)
    where ``kappa_undefined`` gives a reason."""
    if kappa_undefined(c) is not None:
        return None, None
    n = c.n
    # rows: the current judge (pass, fail); columns: the candidate (pass, fail)
    p = [[c.both_pass / n, c.only_candidate_fails / n], [c.only_current_fails / n, c.both_fail / n]]
    row = [p[0][0] + p[0][1], p[1][0] + p[1][1]]
    col = [p[0][0] + p[1][0], p[0][1] + p[1][1]]
    po = p[0][0] + p[1][1]
    pe = row[0] * col[0] + row[1] * col[1]
    k = (po - pe) / (1 - pe)
    diagonal = sum(p[i][i] * (1 - (row[i] + col[i]) * (1 - k)) ** 2 for i in (0, 1))
    off = (1 - k) ** 2 * sum(p[i][j] * (col[i] + row[j]) ** 2 for i in (0, 1) for j in (0, 1) if i != j)
    variance = (diagonal + off - (k - pe * (1 - k)) ** 2) / (n * (1 - pe) ** 2)
    se = math.sqrt(max(0.0, variance))
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
