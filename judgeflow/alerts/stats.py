"""Is a rate's rise over its baseline real? Fisher's exact test, one-sided.

Two periods: the current window with ``x`` bad results of ``n`` and the
baseline with ``y`` bad of ``m``. Given the margins (``x + y`` bad of
``n + m``), the number of bad results that land in the window is
hypergeometric under "no change". The p-value is the chance of at least ``x``
there: ``P(X >= x)``. It is exact for small counts, where a normal
approximation on a handful of events is badly wrong, and needs no scipy: the
first term is computed in log space with :func:`math.lgamma`, the rest from it
by the ratio of successive terms, summed relative to it and rescaled before
they could overflow, so a million results neither overflow nor lose the tail.
"""

from __future__ import annotations

import math


# terms smaller than e**-40 of the largest change a double's sum by nothing
_NEGLIGIBLE = 40.0
_NEGLIGIBLE_RATIO = math.exp(-_NEGLIGIBLE)
_RESCALE = 1e200
_LOG_RESCALE = math.log(_RESCALE)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def hypergeom_log_pmf(k: int, total: int, bad: int, drawn: int) -> float:
    """log P(X = k) for X ~ Hypergeometric(population ``total``, ``bad`` of them
    marked, ``drawn`` drawn without replacement)."""
    return _log_comb(bad, k) + _log_comb(total - bad, drawn - k) - _log_comb(total, drawn)


def fisher_greater(x: int, n: int, y: int, m: int) -> float:
    """One-sided Fisher's exact p-value that the window's rate ``x/n`` is
    greater than the baseline's ``y/m``: ``P(X >= x)`` given the margins.

    1.0 when either period is empty (nothing to compare)."""
    for name, value in (("x", x), ("n", n), ("y", y), ("m", m)):
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    if x > n or y > m:
        raise ValueError("bad counts cannot exceed their sample sizes")
    if n == 0 or m == 0:
        return 1.0
    total, bad = n + m, x + y
    high = min(n, bad)  # the window cannot hold more bad results than it or the total has
    if x > high:  # pragma: no cover - excluded by the checks above
        return 0.0
    # the terms relative to the first, each from the one before (the ratio of
    # successive hypergeometric terms), rescaled before they could overflow
    first, shift = hypergeom_log_pmf(x, total, bad, n), 0.0
    term, acc, peak = 1.0, 0.0, 1.0
    for k in range(x, high + 1):
        if term < peak * _NEGLIGIBLE_RATIO:  # past the mode the terms only shrink: the rest cannot matter
            break
        acc += term
        peak = max(peak, term)
        if k < high:
            term *= (bad - k) * (n - k) / ((k + 1) * (total - bad - n + k + 1))
        if term > _RESCALE:
            term, acc, peak, shift = term / _RESCALE, acc / _RESCALE, peak / _RESCALE, shift + _LOG_RESCALE
    p = math.exp(first + shift + math.log(acc))
    return min(1.0, max(0.0, p))


def holm_adjusted(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values of one family of tests (``None``: a
    test not made, outside the family).

    With the ``k`` p-values sorted ascending, the ``i``-th (from 0) is adjusted
    to ``max over j <= i of min(1, (k - j) * p_j)``. A test whose adjusted p is
    at most ``alpha`` is exactly a rejection by the Holm-Bonferroni procedure at
    ``alpha``, which keeps the chance of *any* false rejection in the family at
    most ``alpha`` whatever the tests' dependence. A single test is unchanged."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    k = len(ranked)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for j, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (k - j) * p))
        out[i] = running
    return out
