import math
import random

import pytest

from judgeflow.alerts.stats import fisher_greater
from judgeflow.sampling.power import min_detectable_rise, required_n, segment_alpha


def test_the_detectable_rise_shrinks_with_the_sample_and_respects_the_rule():
    small = min_detectable_rise(50, 350, 0.05, alpha=0.01)
    large = min_detectable_rise(5000, 35000, 0.05, alpha=0.01)
    assert small > large > 0
    assert min_detectable_rise(5000, 35000, 0.05, alpha=0.01, min_increase=0.02) == 0.02
    assert min_detectable_rise(10, 70, 0.05, alpha=0.01, min_samples=50) is None


def test_the_sample_size_is_the_two_proportion_formula():
    # p0 0.05 -> p1 0.10, a baseline 7 times the window, one-sided alpha 0.01, 80% power
    p0, p1, r = 0.05, 0.10, 7
    pbar = (p1 + r * p0) / (1 + r)
    root = (2.326348 * math.sqrt(pbar * (1 - pbar) * (1 + 1 / r))
            + 0.841621 * math.sqrt(p1 * (1 - p1) + p0 * (1 - p0) / r)) / (p1 - p0)
    assert required_n(p0, 0.05, alpha=0.01, ratio=r) == math.ceil(root**2)
    # the detectable rise of that many results is the rise it was sized for
    n = required_n(p0, 0.05, alpha=0.01, ratio=r)
    assert min_detectable_rise(n, n * r, p0, alpha=0.01) == pytest.approx(0.05, abs=5e-4)


def test_a_stricter_alpha_or_a_smaller_rise_needs_more():
    base = required_n(0.02, 0.05, alpha=0.01, ratio=7)
    assert required_n(0.02, 0.05, alpha=segment_alpha(0.01, 7), ratio=7) > base
    assert required_n(0.02, 0.03, alpha=0.01, ratio=7) > base
    assert segment_alpha(0.01, 7) == pytest.approx(0.01 / 7)
    assert segment_alpha(0.01, 0) == 0.01


def test_the_sized_sample_finds_the_rise_with_about_80_percent_power_by_fishers_test():
    """The size the planner gives a stratum, run through the rule's own test."""
    rng = random.Random(7)
    p0, rise, alpha, r = 0.02, 0.05, 0.01 / 7, 7
    n = required_n(p0, rise, alpha=alpha, ratio=r)
    found = 0
    trials = 400
    for _ in range(trials):
        x = sum(rng.random() < p0 + rise for _ in range(n))
        y = sum(rng.random() < p0 for _ in range(n * r))
        found += fisher_greater(x, n, y, n * r) <= alpha
    # Fisher's exact test is a little conservative against the normal approximation
    assert 0.65 <= found / trials <= 0.95


def test_no_size_when_there_is_no_rise_to_find():
    assert required_n(0.02, 0.0, alpha=0.01, ratio=7) is None
    assert required_n(0.9995, 0.05, alpha=0.01, ratio=7) is None  # already at the top

