"""Judge spend under control (issue 15), through the real scoring flow: real
PostgreSQL, real Prefect, litellm over HTTP to the local judge server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from judgeflow.flows.scoring import score_new_traces
from tests.support.traces import insert_traces, results


@pytest.fixture
def run(prefect_server, judgeflow_env):
    def _run(**params):
        params.setdefault("evaluate_alerts", False)
        return score_new_traces(**params)

    return _run


def test_a_settle_delay_leaves_a_young_trace_for_later(run, db, monkeypatch):
    now = datetime.now(timezone.utc)
    insert_traces(db, [
        {"id": "young", "created_at": now - timedelta(minutes=1), "output": "Fact: just written."},
        {"id": "settled", "created_at": now - timedelta(minutes=10), "output": "Fact: written a while ago."},
    ])
    monkeypatch.setenv("JUDGEFLOW_SETTLE_DELAY", "5m")

    summary = run()

    assert {trace for trace, _ in results(db)} == {"settled"}
    assert summary.scored == 2 and summary.pending_at_start == 2
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0

    # `judgeflow score`'s default is no delay; a run parameter overrides the setting
    run(settle_delay="0s")
    assert {trace for trace, _ in results(db)} == {"settled", "young"}


def _read_events(name: str, resource_id: str, timeout: float = 60.0):
    import time

    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            page = client.read_events(
                EventFilter(event=EventNameFilter(name=[name]), resource=EventResourceFilter(id=[resource_id])),
                limit=50,
            )
            if page.events:
                return page.events
            time.sleep(0.25)
    return []


@pytest.mark.parametrize("fanout", ["pair", "batch"])
def test_a_budget_stops_claiming_and_a_second_run_finishes(run, db, judge_server, monkeypatch, fanout):
    from judgeflow.tasks.reporting import BUDGET_EXHAUSTED_EVENT
    from tests.support.traces import first_step_calls, scripted_trace

    # a model litellm prices ($0.15 / $0.60 per million tokens), served by the local judge server
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/gpt-4o-mini")
    insert_traces(db, [scripted_trace(i)[0] for i in range(40)])
    budget = 0.004  # about a third of what the 80 pairs cost

    summary = run(budget_usd=budget, batch_size=20, max_concurrency=4, fanout=fanout)

    stored = results(db)
    assert 0 < len(stored) < 80
    assert all(r["status"] == "scored" and r["cost_usd"] > 0 for r in stored.values())
    spent = sum(r["cost_usd"] for r in stored.values())
    assert spent <= budget * 1.1  # admitted on estimates; what ran cost about what was reserved
    assert summary.budget_exhausted and summary.budget_usd == budget
    assert summary.budget_spent_usd == pytest.approx(spent, abs=1e-6)  # rounded to 6 places
    assert summary.left_pending == 80 - len(stored)  # nothing claimed and forgotten
    assert "Budget exhausted" in summary.markdown() and f"{80 - len(stored)} (trace, metric) pairs left pending" in (
        summary.markdown())
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0
    [event] = _read_events(BUDGET_EXHAUSTED_EVENT, f"prefect.flow-run.{summary.flow_run_id}")
    assert event.payload["left_pending"] == summary.left_pending

    second = run(fanout=fanout)

    assert len(results(db)) == 80 and second.scored == 80 - len(stored)
    assert not second.budget_exhausted and second.budget_usd is None
    assert set(first_step_calls(judge_server).values()) == {1}  # no pair judged twice


def test_a_budget_is_refused_without_a_price(judgeflow_env, db):
    from typer.testing import CliRunner

    from judgeflow.cli import app

    result = CliRunner().invoke(app, ["score", "--budget-usd", "1"])
    assert result.exit_code == 2
    assert "no price for judge model 'openai/judge-test'" in result.output
    assert "JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK" in result.output
