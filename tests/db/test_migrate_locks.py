"""Upgrading beside a scoring writer: a migration step that needs a table lock
another session holds (a VACUUM's, here held by hand) gives up at once and
tries again, so writers never queue behind it; the writer below would fail
(its lock_timeout) if they did. bench/upgrade.py measures the same at 2M results."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.errors import DatabaseError

BEFORE_ROLLUP = "0015"  # 15_sample_ledger.py
HOLD_S = 3.0

_UPSERT = sa.text(
    """
    INSERT INTO judgeflow.eval_results (trace_id, metric, status, passed, trace_created_at, segment, source, scored_at)
    SELECT :prefix || g, 'toxicity', 'scored', g % 7 <> 0, now() - make_interval(mins => g % 600),
           jsonb_build_object('app', 'app-' || (g % 5)), 'table:llm_traces@results-db', now()
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
                        conn.execute(_UPSERT, {"prefix": "live-", "lo": i * 10, "hi": i * 10 + 9})
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
        conn.execute(_UPSERT, {"prefix": "old-", "lo": 0, "hi": 1999})


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
