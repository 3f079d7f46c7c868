"""Whether a run would find anything to score (judgeflow.db.pending_work.anything_pending),
by the flow's own read plan and definition of done, against a real PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.db.pending_work import anything_pending
from judgeflow.config.settings import load_settings
from tests.support.traces import insert_traces, scripted_trace

METRICS = ["toxicity", "hallucination"]


def _result(db, trace_id: str, metric: str, status: str, failed_runs: int = 0) -> None:
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO judgeflow.eval_results (trace_id, metric, status, failed_runs) "
                             "VALUES (:t, :m, :s, :f)"), {"t": trace_id, "m": metric, "s": status, "f": failed_runs})


def test_pending_by_the_runs_own_definition(judgeflow_env, db, monkeypatch):
    insert_traces(db, [scripted_trace(0)[0]])
    migrate.upgrade(db)
    settings = load_settings()
    assert anything_pending(settings, METRICS)
    _result(db, "tr-0000", "toxicity", "scored")
    assert anything_pending(settings, METRICS)  # hallucination is still to score
    assert not anything_pending(settings, ["toxicity"])
    # a pair that failed in as many runs as allowed is given up, unless retried on purpose
    _result(db, "tr-0000", "hallucination", "failed", failed_runs=settings.max_runs_per_pair)
    assert not anything_pending(settings, METRICS)
    assert anything_pending(settings, METRICS, retry_failed=True)
    # a range holds what it holds
    assert not anything_pending(settings, METRICS, since=datetime(2000, 1, 1, tzinfo=timezone.utc),
                                until=datetime(2000, 1, 2, tzinfo=timezone.utc))


def test_a_trace_younger_than_the_settle_delay_is_not_pending_yet(judgeflow_env, db, monkeypatch):
    insert_traces(db, [{**scripted_trace(0)[0], "created_at": datetime.now(timezone.utc) - timedelta(minutes=1)}])
    migrate.upgrade(db)
    assert anything_pending(load_settings(), METRICS)
    monkeypatch.setenv("JUDGEFLOW_SETTLE_DELAY", "10m")
    assert not anything_pending(load_settings(), METRICS)
