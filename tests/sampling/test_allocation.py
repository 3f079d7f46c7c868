"""Allocation of a sample budget: minimums first, then Neyman; never over budget."""

from __future__ import annotations

import pytest

from judgeflow.sampling.allocation import StratumInput, allocate


def _by_name(plan):
    return {a.name: a for a in plan.strata}


def test_everything_that_fits_is_judged_and_not_sampled():
    strata = [StratumInput("a", 100, 0.01), StratumInput("b", 5, 0.01)]
    plan = allocate(strata, budget_usd=10.0, min_samples=50)
    assert not plan.sampled and [a.judged for a in plan.strata] == [100, 5]
    assert allocate(strata, budget_usd=None, min_samples=50).sampled is False


def test_minimums_first_then_neyman_by_traffic_times_sd():
    strata = [
        StratumInput("big", 10_000, 0.01, fail_rate=0.02),
        StratumInput("noisy", 2_000, 0.01, fail_rate=0.5),
        StratumInput("small", 120, 0.01, fail_rate=0.02),
        StratumInput("tiny", 30, 0.01),
    ]
    plan = allocate(strata, budget_usd=20.0, min_samples=50)  # 2,000 traces of 12,150
    got = _by_name(plan)
    assert plan.sampled and plan.cost_usd <= 20.0 + 1e-9
    assert sum(a.judged for a in plan.strata) == 2000
    assert got["tiny"].judged == 30 and got["small"].judged >= 50  # minimums: min(traffic, 50)
    # Neyman: big / noisy = (10,000 x 0.14) / (2,000 x 0.5) = 1.4
    assert got["big"].judged / got["noisy"].judged == pytest.approx(1.4, rel=0.02)
    assert not plan.short


def test_a_budget_below_the_minimums_is_spread_evenly_and_says_so():
    strata = [StratumInput("a", 1000, 0.01), StratumInput("b", 1000, 0.01), StratumInput("c", 10, 0.01)]
    plan = allocate(strata, budget_usd=0.7, min_samples=50)  # 70 traces; the minimums need 110
    got = _by_name(plan)
    assert got["c"].judged == 10 and got["a"].judged + got["b"].judged == 60
    assert abs(got["a"].judged - got["b"].judged) <= 1
    assert {a.name for a in plan.short} == {"a", "b"}
    assert "cannot pay for every stratum's minimum of 50" in got["a"].short_reason
    assert plan.cost_usd <= 0.7 + 1e-9


@pytest.mark.parametrize("budget", [0.013, 0.5, 3.3, 17.0, 44.4])
def test_never_over_budget_and_within_traffic(budget):
    strata = [StratumInput(f"s{i}", n, c, fail_rate=p) for i, (n, c, p) in enumerate(
        [(5000, 0.003, 0.01), (700, 0.004, 0.2), (90, 0.002, None), (3, 0.01, 0.9), (1, 0.001, 0.0)])]
    plan = allocate(strata, budget_usd=budget, min_samples=50)
    assert plan.cost_usd <= budget + 1e-9
    assert all(0 <= a.judged <= a.traffic for a in plan.strata)
