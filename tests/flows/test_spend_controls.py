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
