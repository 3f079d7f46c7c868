"""The plan's power is the power of the rule that fires: Fisher's test at the
Holm level *and* an observed rise of at least the minimum (issue 46)."""

import math
import random
from datetime import datetime, timezone

import pytest

from judgeflow.alerts.estimates import WeightedCounts
from judgeflow.alerts.evaluation import figures_from_counts
from judgeflow.alerts.lifecycle import breaching
from judgeflow.alerts.stats import fisher_greater
from judgeflow.sampling.power import MAX_N, min_detectable_rise, required_n, rule_power, segment_alpha


def _brute_power(n: int, m: int, p0: float, p1: float, alpha: float, rise: float) -> float:
    """Every (x, y), no shortcut: the rule's own test and epsilon."""
    def pmf(k, size, p):
        return math.comb(size, k) * p**k * (1 - p) ** (size - k)

    return sum(pmf(x, n, p1) * pmf(y, m, p0) for x in range(n + 1) for y in range(m + 1)
               if fisher_greater(x, n, y, m) <= alpha and x / n - y / m + 1e-12 >= rise)


@pytest.mark.parametrize("n,m,p0,p1,alpha,rise", [
    (12, 40, 0.05, 0.30, 0.05, 0.05), (30, 90, 0.10, 0.25, 0.01, 0.02), (25, 25, 0.3, 0.6, 0.05 / 3, 0.1),
    (40, 280, 0.02, 0.12, 0.0125, 0.05),
])
def test_the_power_is_exact_against_every_outcome(n, m, p0, p1, alpha, rise):
    assert rule_power(n, m, p0, p1, alpha=alpha, min_increase=rise) == pytest.approx(
        _brute_power(n, m, p0, p1, alpha, rise), abs=1e-9)


def test_a_z_test_size_finds_a_rise_of_exactly_the_minimum_only_half_the_time():
    """The bug the issue found: sized by a z-test for the minimum rise, the rule fires ~50%."""
    p0, p1, r, alpha = 0.05, 0.10, 7, 0.01
    pbar = (p1 + r * p0) / (1 + r)
    z_n = math.ceil(((2.326348 * math.sqrt(pbar * (1 - pbar) * (1 + 1 / r))
                      + 0.841621 * math.sqrt(p1 * (1 - p1) + p0 * (1 - p0) / r)) / (p1 - p0)) ** 2)
    assert 0.45 <= rule_power(z_n, z_n * r, p0, p1, alpha=alpha, min_increase=0.05) <= 0.55
    # no window finds a true rise of exactly the minimum with 80% power
    assert required_n(p0, 0.05, alpha=alpha, ratio=r, min_increase=0.05) is None
    assert rule_power(MAX_N // 10, MAX_N // 10 * r, p0, p1, alpha=alpha, min_increase=0.05) < 0.55


def test_the_size_is_the_smallest_with_80_percent_power():
    p0, rise, floor_, alpha, r = 0.02, 0.075, 0.05, 0.05 / 4, 7
    n = required_n(p0, rise, alpha=alpha, ratio=r, min_increase=floor_)
    assert n is not None and 20 < n < 1000
    assert rule_power(n, n * r, p0, p0 + rise, alpha=alpha, min_increase=floor_) >= 0.8
    assert rule_power(n - 1, (n - 1) * r, p0, p0 + rise, alpha=alpha, min_increase=floor_) < 0.8


def test_the_detectable_rise_shrinks_with_the_sample_and_stays_above_the_rule():
    small = min_detectable_rise(50, 350, 0.05, alpha=0.01, min_increase=0.02)
    large = min_detectable_rise(5000, 35000, 0.05, alpha=0.01, min_increase=0.02)
    assert small > large > 0.02  # a true rise of exactly the minimum is seen half the time
    assert large < 0.03
    assert min_detectable_rise(10, 70, 0.05, alpha=0.01, min_samples=50) is None
    for n, d in ((50, small), (5000, large)):
        assert rule_power(n, 7 * n, 0.05, 0.05 + d, alpha=0.01, min_increase=0.02) >= 0.8
        assert rule_power(n, 7 * n, 0.05, 0.05 + d - 1e-3, alpha=0.01, min_increase=0.02) < 0.8


def test_a_stricter_alpha_or_a_smaller_rise_needs_more():
    base = required_n(0.02, 0.075, alpha=0.01, ratio=7, min_increase=0.05)
    assert required_n(0.02, 0.075, alpha=segment_alpha(0.01, 7), ratio=7, min_increase=0.05) > base
    assert required_n(0.02, 0.065, alpha=0.01, ratio=7, min_increase=0.05) > base
    assert segment_alpha(0.01, 7) == pytest.approx(0.01 / 7)
    assert segment_alpha(0.01, 0) == 0.01


def test_the_plans_detectable_rise_pages_on_the_first_night_in_80_percent_of_fresh_seeds():
    """A window of the planned size at the reported detectable rise, through the
    product's own figures and decision; seeds 9000+ were never used to tune."""
    p0, floor_, tests, r, n = 0.02, 0.05, 3, 7, 90
    alpha = segment_alpha(0.05, tests)
    d = min_detectable_rise(n, n * r, p0, alpha=alpha, min_increase=floor_)
    exact = rule_power(n, n * r, p0, p0 + d, alpha=alpha, min_increase=floor_)
    assert exact >= 0.8
    from dataclasses import replace

    from judgeflow.alerts.rules import all_rules
    from judgeflow.config.settings import Settings

    settings = Settings(_env_file=None, toxicity_regression_min_increase=floor_, alert_min_samples=30)
    rule = replace(next(r for r in all_rules(settings) if r.name == "toxicity_regression"), alpha=alpha)
    now = datetime.now(timezone.utc)
    fired, seeds = 0, range(9000, 9600)
    for seed in seeds:
        rng = random.Random(seed)
        x = sum(rng.random() < p0 + d for _ in range(n))
        y = sum(rng.random() < p0 for _ in range(n * r))
        f = figures_from_counts(WeightedCounts.unweighted(n, x), WeightedCounts.unweighted(n * r, y), failed=0,
                                evaluated_at=now, window_start=now)
        fired += breaching(rule, f, firing=False)
    rate, se = fired / len(seeds), math.sqrt(exact * (1 - exact) / len(seeds))
    assert abs(rate - exact) <= 3 * se, (rate, exact)
    assert rate >= 0.8 - 3 * se


def test_no_size_when_there_is_no_rise_to_find():
    assert required_n(0.02, 0.0, alpha=0.01, ratio=7) is None
    assert required_n(0.9995, 0.05, alpha=0.01, ratio=7) is None  # already at the top
