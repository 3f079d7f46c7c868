"""Storing result rows against a real PostgreSQL: text PostgreSQL cannot hold
is replaced, a row it still refuses becomes a 'failed' row without taking its
group down, and a failed re-score keeps the score it was meant to replace."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.metrics.result import MetricResult
from judgeflow.config.settings import Settings
from judgeflow.db.results_store import store_outcomes
from judgeflow.run.outcomes import failure_row as _failure_row, result_row as _result_row
from judgeflow.model import TraceWork
from judgeflow.errors import TransientJudgeError
from tests.support.traces import results

T0 = datetime(2026, 11, 21, tzinfo=timezone.utc)


def _work(trace_id: str) -> TraceWork:
    return TraceWork(trace_id=trace_id, metric="hallucination", created_at=T0, output="x")


def _scored(trace_id: str, **overrides) -> dict:
    result = MetricResult(
        name="hallucination", metric_version="hallucination/1+test", status="scored", score=0.25,
        passed=True, threshold=0.5, reason="fine", details={"reasons": ["fine"]}, judge_model="openai/judge-test",
        prompt_tokens=10, completion_tokens=5, judge_calls=1,
    )
    return {**_result_row(_work(trace_id), result.model_copy(update=overrides), 1, "run-1")}


def _claim(db, *trace_ids: str) -> None:
    """Claims held by 'me': only a claim's owner writes its result."""
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO judgeflow.claims (trace_id, metric, owner, claimed_at, lease_expires_at) "
                             "SELECT unnest(CAST(:t AS text[])), 'hallucination', 'me', now(), "
                             "now() + interval '1 hour'"), {"t": list(trace_ids)})


def _setup(database_url, db) -> Settings:
    migrate.upgrade(db)
    _claim(db, "a", "b", "c")
    return Settings(database_url=database_url)


def test_unstorable_text_is_replaced_and_a_refused_row_becomes_failed_without_losing_its_group(database_url, db):
    settings = _setup(database_url, db)
    rows = [
        _scored("a", reason="nul\x00 and lone \ud800", details={"reasons": ["x\udc80", {"k\x00": "v"}]},
                prompt_tokens=3_000_000_000),
        _scored("b", score=2.0),  # out of range: the table's check constraint refuses it
        _scored("c"),
    ]
    written = store_outcomes(settings, rows, owner="me", rescore_before=None)

    stored = {tid: row for (tid, _), row in results(db).items()}
    assert set(written) == {("a", "hallucination"), ("b", "hallucination"), ("c", "hallucination")}
    assert stored["a"]["status"] == "scored" and stored["a"]["reason"] == "nul\ufffd and lone \ufffd"
    assert stored["a"]["details"]["reasons"] == ["x\ufffd", {"k\ufffd": "v"}]
    assert stored["a"]["details"]["text_altered"]["fields"] == ["reason", "details"]
    assert stored["a"]["prompt_tokens"] == 3_000_000_000  # bigint
    assert stored["b"]["status"] == "failed" and stored["b"]["error_kind"] == "unstorable"
    assert "eval_results_score_check" in stored["b"]["error"] and stored["b"]["score"] is None
    assert written.refused[("b", "hallucination")] == stored["b"]["error"]
    assert stored["c"]["status"] == "scored"
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0


def test_a_failed_rescore_keeps_the_previous_score_and_notes_the_attempt(database_url, db):
    settings = _setup(database_url, db)
    store_outcomes(settings, [_scored("a")], owner="me", rescore_before=None)
    rescore_before = datetime.now(timezone.utc)

    failure = _failure_row(_work("a"), TransientJudgeError("judge down"), "judge_unavailable", 3, "run-2")
    _claim(db, "a")
    written = store_outcomes(settings, [failure], owner="me", rescore_before=rescore_before)

    row = results(db)[("a", "hallucination")]
    assert row["status"] == "scored" and row["score"] == 0.25 and row["flow_run_id"] == "run-1"
    assert row["details"]["failed_rescores"] == 1
    assert row["details"]["last_failed_rescore"]["error_kind"] == "judge_unavailable"
    assert ("a", "hallucination") in written.kept and ("a", "hallucination") not in written
    # a re-score that succeeds does replace it
    _claim(db, "a")
    store_outcomes(settings, [_scored("a", score=0.75)], owner="me", rescore_before=rescore_before)
    assert results(db)[("a", "hallucination")]["score"] == 0.75
