"""The watermark through the real scoring flow (real PostgreSQL, real
Prefect, the offline judge): a nightly run reads from the watermark minus
the look-back, late rows within it are scored, the watermark never passes a
pair without a result, failed pairs older than the window are retried,
ranged runs neither use nor move it, and nothing is scored twice or lost."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.flows.scoring import score_new_traces
from judgeflow.config.settings import load_settings
from tests.support.traces import BASE_TIME, insert_traces, results

METRICS = ("toxicity", "hallucination")


@pytest.fixture
def env(prefect_server, judgeflow_env, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "offline")
    return judgeflow_env


def _trace(trace_id: str, at: datetime) -> dict:
    return {"id": trace_id, "created_at": at, "output": f"Answer of {trace_id}. It is fine.", "context": ["doc"]}


def _run(**params):
    params.setdefault("evaluate_alerts", False)
    return score_new_traces(**params)


def _marks(db, scope="sample=1.0") -> dict[str, datetime]:
    with db.connect() as conn:
        return dict(conn.execute(
            sa.text("SELECT metric, scored_through FROM judgeflow.watermarks WHERE scope = :s"), {"s": scope}
        ).all())


def _scored_ids(db) -> set[str]:
    return {t for (t, m), r in results(db).items() if r["status"] in ("scored", "skipped")}


def test_a_nightly_run_reads_from_its_watermark_and_scores_late_rows_within_the_lookback(env, db):
    insert_traces(db, [_trace(f"old-{i:02d}", BASE_TIME + timedelta(minutes=i)) for i in range(30)])
    first = _run()
    assert first.scored + first.skipped == 60
    newest = BASE_TIME + timedelta(minutes=29)
    assert _marks(db) == {m: newest for m in METRICS}

    insert_traces(db, [
        _trace("new", newest + timedelta(hours=2)),
        _trace("late-within", newest - timedelta(minutes=40)),  # older than the watermark, within 1h
        _trace("late-beyond", newest - timedelta(days=1)),  # older than the look-back
    ])
    second = _run()

    assert second.pending_at_start == 4 and second.scored + second.skipped == 4
    assert {"new", "late-within"} <= _scored_ids(db) and "late-beyond" not in _scored_ids(db)
    assert _marks(db) == {m: newest + timedelta(hours=2) for m in METRICS}
    # what docs/tables.md says: a backfill over its range scores it, and moves no watermark
    from judgeflow.flows.backfill import backfill_traces

    backfill_traces(since=newest - timedelta(days=2), until=newest)
    assert "late-beyond" in _scored_ids(db)
    assert _marks(db) == {m: newest + timedelta(hours=2) for m in METRICS}
    # nothing twice: one row per pair, each written once
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT max(attempts) FROM judgeflow.eval_results")).scalar_one() == 1
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.superseded_results")).scalar_one() == 0


def test_the_watermark_stops_at_a_pair_another_live_run_holds_and_moves_on_once_it_is_scored(env, db):
    from judgeflow.db.leases import LeaseKeeper
    from judgeflow.tasks.claims import claim_traces

    insert_traces(db, [_trace(f"t-{i:02d}", BASE_TIME + timedelta(minutes=i)) for i in range(10)])
    migrate.upgrade(db)
    settings = load_settings()
    with LeaseKeeper(settings, "other-run:1") as other:
        held = claim_traces.fn(settings, "other-run:1", ["toxicity"], 1, owner_key=other.owner_key, cursor=None)
        assert [w.trace_id for w in held.items] == ["t-00"]
        summary = _run()
        assert summary.scored + summary.skipped == 19  # all but the held pair
        marks = _marks(db)
        # toxicity stops at the pair still in flight; hallucination has every result
        assert marks["toxicity"] == BASE_TIME and marks["hallucination"] == BASE_TIME + timedelta(minutes=9)
    # the other run is gone: its claim is free, the next run scores it and the watermark moves on
    again = _run()
    assert again.scored + again.skipped == 1
    assert _marks(db)["toxicity"] == BASE_TIME + timedelta(minutes=9)
    assert len(results(db)) == 20


def test_failed_pairs_older_than_the_window_are_retried_until_given_up(env, db, monkeypatch):
    insert_traces(db, [_trace(f"t-{i:02d}", BASE_TIME + timedelta(hours=i)) for i in range(6)])
    _run()
    # two old pairs failed before (e.g. the judge was down): one retryable, one given up
    with db.begin() as conn:
        conn.execute(sa.text(
            "UPDATE judgeflow.eval_results SET status = 'failed', score = NULL, passed = NULL, "
            "failed_runs = CASE trace_id WHEN 't-00' THEN 1 ELSE 3 END "
            "WHERE trace_id IN ('t-00', 't-01') AND metric = 'toxicity'"
        ))
    insert_traces(db, [_trace("new", BASE_TIME + timedelta(hours=7))])
    summary = _run()
    stored = results(db)
    assert stored[("t-00", "toxicity")]["status"] == "scored"  # 5 hours older than the window: retried
    assert stored[("t-01", "toxicity")]["status"] == "failed"  # given up (JUDGEFLOW_MAX_RUNS_PER_PAIR=3)
    assert summary.scored + summary.skipped == 3  # t-00 toxicity, new x 2
    # --retry-failed takes the given-up one too
    again = _run(retry_failed=True)
    assert again.scored + again.skipped == 1 and results(db)[("t-01", "toxicity")]["status"] == "scored"


def test_ranged_runs_neither_use_nor_move_the_watermark_and_each_sample_rate_has_its_own(env, db):
    insert_traces(db, [_trace(f"t-{i:02d}", BASE_TIME + timedelta(minutes=i)) for i in range(40)])
    _run(since=BASE_TIME, until=BASE_TIME + timedelta(minutes=10))
    assert _marks(db) == {} and len(results(db)) == 20
    _run(sample_rate=0.5)
    sampled = _marks(db, "sample=0.5")
    assert set(sampled) == set(METRICS) and _marks(db) == {}
    half = len(results(db))
    assert 20 < half < 80  # the sample, without the pairs the ranged run scored
    # a run without a sample rate has no watermark of its own yet: it reads the whole source once
    full = _run()
    assert full.scored + full.skipped == 80 - half
    assert len(results(db)) == 80 and _marks(db) == {m: BASE_TIME + timedelta(minutes=39) for m in METRICS}


def test_the_watermark_never_passes_the_settle_delay(env, db, monkeypatch):
    now = datetime.now(timezone.utc)
    insert_traces(db, [_trace("settled", now - timedelta(hours=2)), _trace("young", now - timedelta(minutes=1))])
    _run(settle_delay="30m")
    assert _scored_ids(db) == {"settled"}
    marks = _marks(db)
    assert marks and all(w <= now - timedelta(minutes=29) for w in marks.values())
    # once settled, the next run finds it (it is in the window)
    monkeypatch.setenv("JUDGEFLOW_SOURCE_LOOKBACK", "1h")
    _run()
    assert _scored_ids(db) == {"settled", "young"}


def test_traces_read_from_a_lagging_replica_are_scored_by_a_later_run_never_lost(env, db, pg_server, monkeypatch):
    """JUDGEFLOW_SOURCE_DATABASE_URL: keys and bodies come from the "replica"
    (another database, holding the only llm_traces); results, claims and the
    watermark go to the primary. Rows the replica shows only later, older than
    what it already showed, are scored by the next run."""
    from tests.support.postgres import create_database, drop_database

    name, replica_url = create_database(pg_server)
    replica = sa.create_engine(replica_url)
    try:
        monkeypatch.setenv("JUDGEFLOW_SOURCE_DATABASE_URL", replica_url)
        insert_traces(replica, [_trace(f"t-{i:02d}", BASE_TIME + timedelta(minutes=i)) for i in range(20)])
        first = _run()
        assert first.scored + first.skipped == 40
        with db.connect() as conn:  # the primary never held the traces
            assert conn.execute(sa.text("SELECT to_regclass('public.llm_traces')")).scalar_one() is None
        assert _marks(db) == {m: BASE_TIME + timedelta(minutes=19) for m in METRICS}

        # the replica catches up: rows committed on the primary after it last showed
        # rows, some with an older created_at than its newest (longer transactions)
        insert_traces(replica, [_trace("lagged-a", BASE_TIME + timedelta(minutes=12, seconds=30)),
                                _trace("lagged-b", BASE_TIME + timedelta(minutes=19, seconds=1)),
                                _trace("fresh", BASE_TIME + timedelta(minutes=30))])
        second = _run()
        assert second.scored + second.skipped == 6
        assert {"lagged-a", "lagged-b", "fresh"} <= _scored_ids(db) and len(results(db)) == 46

        # status and db check read the replica too
        from judgeflow.status.check import check_database
        from judgeflow.status.work import work_status

        report = work_status(load_settings())
        assert all(report["metrics"][m]["pending"] == 0 and report["metrics"][m]["scored"]
                   + report["metrics"][m]["skipped"] == 23 for m in METRICS)
        assert check_database(load_settings()).ok
    finally:
        replica.dispose()
        from judgeflow.db.engine import dispose_engines

        dispose_engines()
        drop_database(pg_server, name)
