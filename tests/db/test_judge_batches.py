"""The judge's batches on record (judgeflow/db/judge_batches.py, migration
19_judge_batches.py) on a real PostgreSQL: what a later run finds of a line,
what `status` lists, and which pairs a batch holds against other runs' claims."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from judgeflow.config.settings import Settings
from judgeflow.db import judge_batches, migrate
from judgeflow.db.pairs import Done, claim_keys, count_pending_keys
from judgeflow.judge.batch_lines import BatchLine
from judgeflow.sources.types import TraceKey

WINDOW_S = 24 * 3600.0
KEYS = [TraceKey(f"tr-{i}", datetime(2026, 11, 1, i, tzinfo=timezone.utc)) for i in range(3)]


@pytest.fixture
def settings(db, database_url) -> Settings:
    migrate.upgrade(db)
    return Settings(database_url=database_url)


def record(settings: Settings, batch_id: str, lines: list[tuple[str, str, str]], status: str = "submitted") -> None:
    judge_batches.record_batch(settings, judge_batches.BatchRecord(
        batch_id=batch_id, provider="openai", model="openai/judge-test", round=1, owner="run-a", status=status,
        expires_at=datetime.now(timezone.utc)), [BatchLine(cid, trace, metric, "step") for cid, trace, metric in lines])


def test_a_line_is_found_in_its_live_batch_and_counted_in_the_dead_ones(settings):
    record(settings, "batch-1", [("jf-a", "tr-0", "toxicity"), ("jf-b", "tr-1", "toxicity")])
    assert judge_batches.lines_on_record(settings, ["jf-a", "jf-z"]) == {
        "jf-a": judge_batches.LineOnRecord("batch-1", 0, None)}

    judge_batches.update_batch(settings, "batch-1", "expired", 1, 0)
    record(settings, "batch-2", [("jf-a", "tr-0", "toxicity")])  # sent again once
    assert judge_batches.lines_on_record(settings, ["jf-a", "jf-b"]) == {
        "jf-a": judge_batches.LineOnRecord("batch-2", 1, "expired"),
        "jf-b": judge_batches.LineOnRecord(None, 1, "expired")}

    judge_batches.update_batch(settings, "batch-2", "cancelled", 0, 0)
    assert judge_batches.lines_on_record(settings, ["jf-a"]) == {
        "jf-a": judge_batches.LineOnRecord(None, 2, "cancelled")}


def test_status_lists_the_batches_out_and_their_age_not_the_ended_ones(settings, db):
    record(settings, "batch-out", [("jf-a", "tr-0", "toxicity")])
    record(settings, "batch-done", [("jf-b", "tr-1", "toxicity")])
    judge_batches.update_batch(settings, "batch-done", "completed", 1, 0)
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE judgeflow.judge_batches SET created_at = now() - interval '2 hours' "
                             "WHERE batch_id = 'batch-out'"))
    (out,) = judge_batches.batches_out(settings)
    assert (out.batch_id, out.status, out.lines, out.round) == ("batch-out", "submitted", 1, 1)
    assert 2 * 3600 - 60 < out.age_s < 2 * 3600 + 600
    with db.connect() as conn:
        ended = conn.execute(sa.text("SELECT ended_at IS NOT NULL FROM judgeflow.judge_batches "
                                     "WHERE batch_id = 'batch-done'")).scalar_one()
    assert ended


def _pending(db, done: Done) -> dict[str, int]:
    with db.connect() as conn:
        return count_pending_keys(conn, KEYS, ["toxicity", "hallucination"], done=done)


@pytest.mark.parametrize("death", ["expired", "cancelled", "failed", "too old"])
def test_a_pair_in_a_live_batch_is_left_to_batch_runs_until_its_batch_is_dead(settings, db, death):
    record(settings, "batch-1", [("jf-a", "tr-0", "toxicity"), ("jf-b", "tr-1", "toxicity")])
    online, batched = Done(batch_window_s=WINDOW_S), Done()

    assert _pending(db, online) == {"toxicity": 1, "hallucination": 3}
    assert _pending(db, batched) == {"toxicity": 3, "hallucination": 3}
    with db.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        claimed, _ = claim_keys(conn, KEYS, ["toxicity"], n_keys=3, done=online, owner="online-run", owner_key=None,
                                lease_s=60)
    assert [(KEYS[i].id, metric) for i, metric, mine in claimed if mine] == [("tr-2", "toxicity")]

    if death == "too old":  # a record older than the provider's window, whatever it last said
        with db.begin() as conn:
            conn.execute(sa.text("UPDATE judgeflow.judge_batches SET created_at = now() - interval '25 hours'"))
    else:
        judge_batches.update_batch(settings, "batch-1", death, 0, 0)
    with db.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        claimed, _ = claim_keys(conn, KEYS, ["toxicity"], n_keys=3, done=online, owner="online-run", owner_key=None,
                                lease_s=60)
    assert sorted(KEYS[i].id for i, _, mine in claimed if mine) == ["tr-0", "tr-1"]


def test_a_collected_line_holds_its_pair_no_more_and_is_asked_anew(settings, db):
    record(settings, "batch-1", [("jf-a", "tr-0", "toxicity"), ("jf-b", "tr-1", "toxicity")])
    judge_batches.update_batch(settings, "batch-1", "completed", 2, 0)
    judge_batches.mark_collected(settings, "batch-1", ["jf-a"])

    assert _pending(db, Done(batch_window_s=WINDOW_S)) == {"toxicity": 2, "hallucination": 3}
    # collected, its pair not stored (the run was stopped in a later round): a run asking it again reads
    # its answer in batch-1 instead of paying for it again
    assert judge_batches.lines_on_record(settings, ["jf-a", "jf-b"]) == {
        "jf-a": judge_batches.LineOnRecord(None, 0, None, "batch-1"),
        "jf-b": judge_batches.LineOnRecord("batch-1", 0, None)}
    # once its pair's result is stored, the answer was used: a re-score asks the same request anew
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, scored_at) "
                             "VALUES ('tr-0', 'toxicity', 'v1', 'scored', clock_timestamp())"))
    assert judge_batches.lines_on_record(settings, ["jf-a"]) == {"jf-a": judge_batches.LineOnRecord(None, 0, None)}


def test_an_online_answer_to_a_failed_line_is_found_until_its_pair_is_stored(settings, db):
    from judgeflow.judge.base import JudgeReply

    record(settings, "batch-1", [("jf-a", "tr-0", "toxicity")])
    judge_batches.update_batch(settings, "batch-1", "completed", 0, 1)  # the provider failed the line
    reply = JudgeReply('{"verdict": "no"}', "judge-test", 120, 8, 0, 0.00031, 0.0, 1)
    judge_batches.record_online_answer(settings, BatchLine("jf-a", "tr-0", "toxicity", "step"), reply)
    # a run asking the line again gets the answer it was paid for, not the batch's failure
    assert judge_batches.lines_on_record(settings, ["jf-a", "jf-b"]) == {
        "jf-a": judge_batches.LineOnRecord("batch-1", 0, None, None, reply)}
    # asked online again (a re-score of the same request failed in a batch again): the newer answer
    newer = JudgeReply('{"verdict": "yes"}', "judge-test", 120, 9, 0, 0.00032, 0.0, 1)
    judge_batches.record_online_answer(settings, BatchLine("jf-a", "tr-0", "toxicity", "step"), newer)
    assert judge_batches.lines_on_record(settings, ["jf-a"])["jf-a"].answered_online == newer
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, scored_at) "
                             "VALUES ('tr-0', 'toxicity', 'v1', 'scored', clock_timestamp())"))
    assert judge_batches.lines_on_record(settings, ["jf-a"])["jf-a"].answered_online is None
