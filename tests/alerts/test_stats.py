"""Fisher's exact test against an independent computation: exact integer
enumeration of the hypergeometric tail (and scipy when the venv has it)."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from judgeflow.alerts.stats import fisher_greater


def brute_force_greater(x: int, n: int, y: int, m: int) -> Fraction:
    """P(window holds >= x of the x+y bad results), by counting every way to
    pick the window's n results from the n+m: exact rational arithmetic."""
    total, bad = n + m, x + y
    ways = comb(total, n)
    return Fraction(sum(comb(bad, k) * comb(total - bad, n - k) for k in range(x, min(n, bad) + 1)), ways)


CASES = [
    (3, 10, 0, 10),  # three events: where a normal approximation is useless
    (0, 10, 3, 10),
    (5, 50, 1, 300),
    (12, 400, 20, 2800),
    (30, 400, 20, 2800),
    (1, 1, 0, 1),
    (0, 0, 4, 10),
    (7, 7, 0, 500),
    (40, 1000, 300, 7000),
]
# too big for exact rational enumeration in a quick test: checked against scipy
LARGE = [(200, 5000, 700, 35000), (600, 20_000, 700, 140_000), (50, 20_000, 700, 140_000)]


@pytest.mark.parametrize("x, n, y, m", CASES)
def test_matches_exact_enumeration(x, n, y, m):
    p = fisher_greater(x, n, y, m)
    if n == 0 or m == 0:
        assert p == 1.0
        return
    exact = brute_force_greater(x, n, y, m)
    assert p == pytest.approx(float(exact), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("x, n, y, m", [c for c in CASES + LARGE if c[1] and c[3]])
def test_matches_scipy_when_installed(x, n, y, m):
    stats = pytest.importorskip("scipy.stats")
    expected = stats.fisher_exact([[x, n - x], [y, m - y]], alternative="greater").pvalue
    assert fisher_greater(x, n, y, m) == pytest.approx(expected, rel=1e-7, abs=1e-300)


def test_three_events_against_none_is_not_significant_at_one_percent():
    # 3/10 vs 0/10: a z-test says p ~ 0.03 (one-sided); the exact tail is 0.105
    assert fisher_greater(3, 10, 0, 10) == pytest.approx(float(Fraction(3 * 2, 57)), rel=1e-12)
    assert fisher_greater(3, 10, 0, 10) > 0.01


def test_large_counts_do_not_overflow_and_keep_the_tail():
    p = fisher_greater(600, 20_000, 700, 140_000)  # 3% vs 0.5%
    assert 0.0 <= p < 1e-100
    assert fisher_greater(50, 20_000, 700, 140_000) > 0.9999  # an improvement is nowhere near significant
    # the equal-rates case sits in the middle of the distribution, as it should
    assert 0.3 < fisher_greater(100, 20_000, 700, 140_000) < 0.7


def test_rejects_impossible_counts():
    with pytest.raises(ValueError):
        fisher_greater(5, 4, 0, 10)
    with pytest.raises(ValueError):
        fisher_greater(-1, 4, 0, 10)


def test_holm_adjusted_p_values():
    from judgeflow.alerts.stats import holm_adjusted

    # sorted 0.01, 0.02, 0.04 of 3 tests: 3 x 0.01, max(0.03, 2 x 0.02), max(0.04, 1 x 0.04)
    assert holm_adjusted([0.04, 0.01, None, 0.02]) == [
        pytest.approx(0.04), pytest.approx(0.03), None, pytest.approx(0.04)]
    assert holm_adjusted([0.003]) == [0.003]  # a family of one is unchanged
    assert holm_adjusted([0.5, 0.6, 0.7]) == [1.0, 1.0, 1.0]  # capped at 1
    assert holm_adjusted([None, None]) == [None, None]
    # step-down: stops at the first p above alpha / (tests left), later ones never rejected
    adjusted = holm_adjusted([0.001, 0.011, 0.012, 0.5])
    assert [p <= 0.05 for p in adjusted] == [True, True, True, False]
    assert [p <= 0.01 for p in adjusted] == [True, False, False, False]
