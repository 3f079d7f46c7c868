"""The weighted rate and its interval: exact without weights, covering the truth with them."""

from __future__ import annotations

import random

import pytest

from judgeflow.alerts.estimates import WeightedCounts, estimate, wilson
from judgeflow.alerts.evaluation import figures_from_counts
from judgeflow.alerts.stats import fisher_greater
from judgeflow.sampling.allocation import StratumInput, allocate
from judgeflow.sampling.selection import select


def test_without_weights_the_estimate_is_the_plain_share_and_counts():
    e = estimate(WeightedCounts.unweighted(120, 7))
    assert e.rate == 7 / 120 and (e.eff_n, e.eff_bad, e.judged) == (120, 7, 120)
    assert (e.ci_low, e.ci_high) == wilson(7 / 120, 120)
    assert e.ci_low < 7 / 120 < e.ci_high
    assert estimate(WeightedCounts()).rate is None


def test_without_weights_the_figures_are_todays():
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    f = figures_from_counts(WeightedCounts.unweighted(200, 30), WeightedCounts.unweighted(1400, 70), failed=2,
                            evaluated_at=now, window_start=now)
    assert (f.value, f.baseline_value) == (30 / 200, 70 / 1400)
    assert f.p_value == fisher_greater(30, 200, 70, 1400)
    assert (f.sample_size, f.violations, f.baseline_sample_size) == (200, 30, 1400)


def test_weights_give_the_ratio_estimate_and_a_smaller_effective_size():
    # stratum A: 100 judged of 1000 (w=10), 10 bad; stratum B: 50 of 50 (w=1), 25 bad
    c = WeightedCounts(n=150, bad=35, sum_w=1000 + 50, sum_w_bad=100 + 25, sum_w2=100 * 100 + 50)
    e = estimate(c)
    assert e.rate == pytest.approx(125 / 1050)
    assert e.n_eff == pytest.approx(1050**2 / 10050) and e.n_eff < 150
    assert e.traces == 1050 and e.judged == 150


def _night(rng: random.Random, rates: dict[str, float], traffic: dict[str, int]) -> dict[str, list[tuple[str, bool]]]:
    return {s: [(f"{s}-{i}", rng.random() < rates[s]) for i in range(traffic[s])] for s in traffic}


def test_intervals_cover_the_truth_on_seeded_sampled_traffic():
    """The planner's own allocation and selection over synthetic nights; the
    95% interval holds the night's true failing rate in about 95% of them."""
    from datetime import date, timedelta

    traffic = {"big": 4000, "mid": 800, "small": 100}
    rates = {"big": 0.03, "mid": 0.10, "small": 0.25}
    covered, nights = 0, 400
    for seed in range(nights):
        rng = random.Random(seed)
        night = _night(rng, rates, traffic)
        truth = sum(bad for rows in night.values() for _, bad in rows) / sum(traffic.values())
        plan = allocate([StratumInput(s, traffic[s], 0.01, rates[s]) for s in traffic], budget_usd=6.0,
                        min_samples=50)
        n = w = wb = w2 = bad_n = 0
        for a in plan.strata:
            chosen = select([t for t, _ in night[a.name]], a.judged, date(2026, 1, 1) + timedelta(days=seed))
            weight = 1 / a.inclusion_prob
            for t, bad in night[a.name]:
                if t in chosen:
                    n, w, w2 = n + 1, w + weight, w2 + weight * weight
                    wb, bad_n = wb + weight * bad, bad_n + bad
        e = estimate(WeightedCounts(n, bad_n, w, wb, w2))
        covered += e.ci_low <= truth <= e.ci_high
    assert 0.91 <= covered / nights <= 0.99, covered / nights
