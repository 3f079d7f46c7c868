"""The sample-budget benchmark runs judgeflow's own planner and rule and keeps every night within budget."""

from __future__ import annotations

from bench.sampling import COST, REGRESSION_DAY, SHARE, TARGET, simulate


def test_the_budgeted_month_stays_within_budget_and_finds_a_large_regression():
    traffic = 3000
    month = simulate("budget", 0, traffic, 0.4)
    assert len(month.spend) == 30 and max(month.spend) <= SHARE * COST * traffic + 1e-9
    assert any(day >= REGRESSION_DAY and segment == f"app={TARGET}" for day, segment in month.fired)
