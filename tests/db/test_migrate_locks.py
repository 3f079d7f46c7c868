"""Upgrading beside a scoring writer: a migration step that needs a table lock
another session holds (a VACUUM's, here held by hand) gives up at once and
tries again, and a judge epoch recorded while `judgeflow db rollup` builds
waits for the build step without holding the rollup, so writers never queue
behind either; the writer below would fail (its lock_timeout) if they did.
bench/upgrade.py measures the same at 2M results."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.db.epochs import record_epochs
from judgeflow.db.rollup import build, build_step, compact_rollup, differences
from judgeflow.errors import DatabaseError

BEFORE_ROLLUP = "0015"  # 15_sample_ledger.py
HOLD_S = 3.0
SOURCE = "table:llm_traces@results-db"

_UPSERT = sa.text(
    """
    INSERT INTO judgeflow.eval_results (trace_id, metric, status, passed, trace_created_at, segment, source, scored_at)
    SELECT :prefix || g, 'toxicity', 'scored', g % 7 <> 0, now() - make_interval(mins => g % 600),
           jsonb_build_object('app', 'app-' || (g % 5)), :source, now()
    FROM generate_series(CAST(:lo AS int), CAST(:hi AS int)) g
    ON CONFLICT (trace_id, metric) DO UPDATE SET passed = NOT excluded.passed, scored_at = now()
    """
)


class Writer(threading.Thread):
    """Small transactions that give up on any lock wait of a second (lock_timeout)."""

    def __init__(self, engine: sa.Engine):
        super().__init__(daemon=True)
        self.engine, self.stop = engine, threading.Event()
        self.committed: list[float] = []
        self.errors: list[str] = []

    def run(self) -> None:
        i = 0
        with self.engine.connect() as conn:
            while not self.stop.is_set():
                try:
                    with conn.begin():
                        conn.execute(sa.text("SET LOCAL lock_timeout = '1s'"))
                        conn.execute(_UPSERT, {"prefix": "live-", "lo": i * 10, "hi": i * 10 + 9,
                                                "source": SOURCE})
                    self.committed.append(time.monotonic())
                except sa.exc.DBAPIError as exc:
                    self.errors.append(str(exc.orig).splitlines()[0])
                i += 1
                self.stop.wait(0.02)


def _hold_vacuum_lock(engine: sa.Engine, held: threading.Event, seconds: float) -> None:
    """What a VACUUM of the results holds: writers never wait for it, a CREATE TRIGGER does."""
    with engine.connect() as conn, conn.begin():
        conn.execute(sa.text("LOCK TABLE judgeflow.eval_results IN SHARE UPDATE EXCLUSIVE MODE"))
        held.set()
        time.sleep(seconds)


def _at_revision_15_with_results(engine: sa.Engine) -> None:
    migrate.upgrade(engine, BEFORE_ROLLUP)
    with engine.begin() as conn:
        conn.execute(_UPSERT, {"prefix": "old-", "lo": 0, "hi": 1999, "source": SOURCE})


def test_the_upgrade_waits_out_a_vacuum_without_holding_up_the_writer(empty_db):
    engine = empty_db
    _at_revision_15_with_results(engine)
    held = threading.Event()
    holder = threading.Thread(target=_hold_vacuum_lock, args=(engine, held, HOLD_S))
    writer = Writer(engine)
    writer.start()
    holder.start()
    assert held.wait(10)
    t0 = time.monotonic()
    try:
        reached = migrate.upgrade(engine)
        took = time.monotonic() - t0
    finally:
        holder.join()
        writer.stop.set()
        writer.join()
    assert reached == migrate.head_revision()
    assert took >= HOLD_S - 0.5  # it did meet the lock: it waited it out, trying again
    assert writer.errors == []  # no write waited a second for a lock
    during = [t for t in writer.committed if t0 <= t <= t0 + took]
    assert len(during) >= 10, len(during)  # and writes went on meanwhile
    with engine.connect() as conn:
        triggers = conn.execute(sa.text(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'judgeflow.eval_results'::regclass "
            "AND tgname LIKE 'eval_results_rollup_%'")).scalar_one()
    assert triggers == 4  # insert, update, delete, truncate: the rollup is kept from now on


def test_an_upgrade_that_never_gets_the_lock_says_so_and_leaves_the_schema_as_it_was(empty_db):
    engine = empty_db
    _at_revision_15_with_results(engine)
    held = threading.Event()
    holder = threading.Thread(target=_hold_vacuum_lock, args=(engine, held, HOLD_S))
    holder.start()
    assert held.wait(10)
    try:
        with pytest.raises(DatabaseError, match="kept a lock on one of its tables .* try again"):
            migrate.upgrade(engine, retry_for_s=1.0)
    finally:
        holder.join()
    assert migrate.current_revision(engine) == BEFORE_ROLLUP
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT to_regclass('judgeflow.result_rollup')")).scalar() is None


def _waiting(engine: sa.Engine, statement: str) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(sa.text(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE :q "
            "AND pid <> pg_backend_pid())"), {"q": f"%{statement}%"}).scalar())


def _until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _epoch_beside(engine: sa.Engine, locked_lines: str, work: threading.Thread, statement: str) -> None:
    """While a session holds ``locked_lines`` of the rollup, so ``work`` (which runs ``statement``) stays
    in progress, a judge epoch is recorded: it must wait (on judge_epochs) while a writer that gives up
    on any lock wait of a second goes on writing."""
    locker = engine.connect()
    locker.begin()
    assert locker.execute(sa.text(f"SELECT count(*) FROM (SELECT 1 FROM judgeflow.result_rollup "
                                  f"WHERE {locked_lines} FOR UPDATE) x")).scalar_one() >= 1
    writer = Writer(engine)
    epoch = threading.Thread(target=lambda: _record_epoch(engine))
    writer.start()
    try:
        work.start()
        assert _until(lambda: _waiting(engine, statement))
        epoch.start()
        assert _until(lambda: _waiting(engine, "judge_epochs"))  # the epoch waits, for the work
        t0 = time.monotonic()
        time.sleep(HOLD_S)
    finally:
        locker.rollback()
        locker.close()
        work.join()
        epoch.join()
        writer.stop.set()
        writer.join()
    assert writer.errors == []  # no write waited a second for a lock
    assert len([t for t in writer.committed if t0 <= t <= t0 + HOLD_S]) >= 10  # writes went on meanwhile
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.judge_epochs WHERE judge_model = 'judge-new'"
                                    )).scalar_one() == 1


def test_a_judge_epoch_recorded_during_a_build_step_waits_for_it_without_holding_up_the_writer(empty_db):
    engine = empty_db
    _at_revision_15_with_results(engine)
    migrate.upgrade(engine)
    # a result scored now for a trace of an hour not built yet: a line there, which a session locks,
    # so the build step that recomputes that hour stays in progress (a long step, at this size)
    with engine.begin() as conn:
        conn.execute(_UPSERT, {"prefix": "late-", "lo": 60, "hi": 60, "source": SOURCE})
    step = threading.Thread(target=build_step, args=(engine,), kwargs={"hours": 6})
    _epoch_beside(engine, "trace_hour = date_trunc('hour', now() - interval '60 minutes')", step, "rollup_recompute")
    build(engine)
    with engine.connect() as conn:
        assert differences(conn) == []  # and the rollup is exact, the new epoch's marks included


def test_a_judge_epoch_recorded_during_a_compaction_waits_for_it_without_holding_up_the_writer(empty_db):
    engine = empty_db
    _at_revision_15_with_results(engine)
    migrate.upgrade(engine)
    build(engine)
    with engine.begin() as conn:  # a delta to fold, whose line a session locks: the compaction stays in progress
        conn.execute(_UPSERT, {"prefix": "late-", "lo": 60, "hi": 60, "source": SOURCE})
    _epoch_beside(engine, "NOT folded", threading.Thread(target=compact_rollup, args=(engine,)), "WITH hours AS")
    with engine.connect() as conn:
        assert differences(conn) == []


def _record_epoch(engine: sa.Engine) -> None:
    """What a run with a new judge model does first (judgeflow/db/epochs.py)."""
    with engine.begin() as conn:
        record_epochs(conn, SOURCE, {"toxicity": ("v1", "judge-new")})
