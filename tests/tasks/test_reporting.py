"""The run summary's figures (tasks/reporting.py) say what the run knows of its cost."""

from __future__ import annotations

from judgeflow.tasks.reporting import RunSummary


def _cost(summary: RunSummary) -> str:
    return {row["figure"]: row["value"] for row in summary.table()}["cost (USD)"]


def test_a_run_that_billed_no_call_cost_nothing_and_unpriced_calls_cost_an_unknown_sum():
    # stopped (Ctrl-C) before any batch line was answered: nothing billed, as its online cost says
    stopped = RunSummary(deferred=360, stopped=True, judge_calls=0, cost_usd=None, online_cost_usd=0.0)
    table = {row["figure"]: row["value"] for row in stopped.table()}
    assert table["cost (USD)"] == "0.0000"
    assert table["cost online (USD, the same tokens at the online prices)"] == "0.0000"
    assert _cost(RunSummary(judge_calls=3, cost_usd=None)) == "unknown"
    assert _cost(RunSummary(judge_calls=3, cost_usd=0.0123)) == "0.0123"


def test_a_cancelled_night_is_headed_cancelled_not_stopped_by_ctrl_c():
    cancelled = RunSummary(stopped=True, cancelled=True).markdown()
    assert "**Cancelled.** The night's flow run was cancelled through Prefect" in cancelled
    assert "Ctrl-C" not in cancelled
    assert "**Stopped (Ctrl-C).**" in RunSummary(stopped=True).markdown()
