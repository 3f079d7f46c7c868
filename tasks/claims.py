"""Claiming work in PostgreSQL so concurrent runs never score the same
(trace, metric) twice.

A claim is a row in ``judgeflow.claims`` with a lease and the owner's key. A
run takes unclaimed (or free) pairs with ``INSERT ... ON CONFLICT DO UPDATE
... WHERE the claim is not held``: PostgreSQL serialises conflicting inserts on
the primary key, so of two runs racing for a pair exactly one gets it back
from ``RETURNING``.

A claim is held while its lease runs *and* its owner still holds its run lock
(see :data:`judgeflow.db.pending.RUN_LOCK_NAMESPACE`): :class:`LeaseKeeper`
takes a session-level advisory lock on a connection of its own when the run
starts and keeps it until the run has settled. A run killed mid-way loses that
connection and with it the lock, so the next run takes its claims over at
once. The same connection's thread renews the run's leases, so renewal
depends on neither the judge, the task runner nor the Prefect server; the
lease only frees the claims of an owner that is alive but stopped renewing
(frozen, or cut off from the database without the server noticing).
"""

from __future__ import annotations

import logging
import secrets
import threading
from datetime import datetime
from typing import Callable

from prefect import task
from prefect.cache_policies import NO_CACHE
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from judgeflow.alerts.segments import segment_values
from judgeflow.db.engine import CONNECT_ARGS, database_url, engine_for
from judgeflow.db.pending import RUN_LOCK_NAMESPACE, count_pending, held, pending_where
from judgeflow.settings import normalise_database_url
from judgeflow.db.source import SourceTable
from judgeflow.errors import ConfigError, DatabaseError
from judgeflow.settings import Settings
from judgeflow.tasks.work import ClaimedBatch, Cursor, TraceWork

log = logging.getLogger("judgeflow.claims")


def _table_only(settings: Settings) -> SourceTable:
    """The table source; a preset (JUDGEFLOW_SOURCE litellm, phoenix) is read only through
    judgeflow.db.trace_source, which claiming does not use yet: refused rather than
    reading JUDGEFLOW_TRACES_TABLE in its place."""
    if settings.source != "table":
        raise ConfigError(
            f"JUDGEFLOW_SOURCE={settings.source} is checked by `judgeflow db check` but not yet scored by this "
            "version: runs read JUDGEFLOW_SOURCE=table only"
        )
    return SourceTable.parse(settings.traces_table)


def _source(settings: Settings, conn) -> tuple[SourceTable, str]:
    source = _table_only(settings)
    return source, source.select_list(source.columns(conn))


# Of several source rows with one id, the run scores the one with the earliest
# created_at (the first it meets: work is taken oldest first, and a later copy
# finds the pair claimed or done); copies created at the same instant are
# ordered by the md5 of their output, so every run picks the same one.
DUPLICATE_TIE_BREAK = "md5(COALESCE(t.output::text, ''))"


def _work_items(rows, segment_keys: tuple[str, ...] = ()) -> list[TraceWork]:
    """Our claimed rows as work, one per (trace, metric) even if the source
    holds duplicate ids (the first copy in claim order wins), with the
    ``segment_keys`` values of their metadata."""
    items: dict[tuple[str, str], TraceWork] = {}
    for r in rows:
        if r["mine"] and (r["trace_id"], r["metric"]) not in items:
            items[(r["trace_id"], r["metric"])] = TraceWork(
                trace_id=r["trace_id"], metric=r["metric"], created_at=r["created_at"], input=r["input"],
                output=r["output"], context=r["context"], metadata=r["metadata"],
                segment=segment_values(r["metadata"], segment_keys),
            )
    return list(items.values())


@task(name="claim-traces", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=[2, 5])
def claim_traces(
    settings: Settings,
    owner: str,
    metrics: list[str],
    batch_size: int,
    cursor: Cursor | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    sample_rate: float = 1.0,
    rescore_before: datetime | None = None,
    settle_delay_s: float = 0.0,
    owner_key: int | None = None,
    run_started: datetime | None = None,
    max_failed_runs: int | None = None,
) -> ClaimedBatch:
    """Claim up to ``batch_size`` pending (trace, metric) pairs after ``cursor``,
    oldest first, and return them with their trace content. ``owner_key`` is
    the key of the run lock ``owner`` holds (:class:`LeaseKeeper`); without
    one the claims live by their lease alone."""
    where, params = pending_where(
        since=since, until=until, sample_rate=sample_rate, rescore_before=rescore_before,
        after=(cursor.created_at, cursor.trace_id, cursor.metric) if cursor else None,
        settle_delay_s=settle_delay_s,
        run_started=run_started, max_failed_runs=max_failed_runs,
    )
    if cursor:
        # The row comparison on (created_at, id, metric) cannot bound the index
        # scan (metric is not in the index), so without this the scan started at
        # the oldest trace on every batch: a batch half-way through a 100k-trace
        # backlog walked 50k index entries (32 ms instead of ~2 ms; bench/).
        where += " AND t.created_at >= :c_at"
    params.update(
        metrics=list(metrics), n=batch_size, owner=owner, lease=settings.lease_timeout_s, owner_key=owner_key
    )
    try:
        # autocommit, one statement: a process frozen between a statement and
        # its COMMIT would hold the new claims' row locks, and another run
        # trying to take them over would wait on it for as long as it is frozen
        with engine_for(settings).connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            source, select_list = _source(settings, conn)
            rows = conn.execute(
                text(
                    f"""
                    WITH candidates AS MATERIALIZED (
                        SELECT {select_list}, m.metric, {DUPLICATE_TIE_BREAK} AS tie_break
                        FROM {source.sql} t CROSS JOIN unnest(CAST(:metrics AS text[])) AS m(metric)
                        WHERE {where}
                        ORDER BY t.created_at, t.id::text, m.metric, {DUPLICATE_TIE_BREAK}
                        LIMIT :n
                    ), claimed AS (
                        INSERT INTO judgeflow.claims (trace_id, metric, owner, claimed_at, lease_expires_at, owner_key)
                        -- a source with duplicate ids proposes a key twice, which
                        -- ON CONFLICT DO UPDATE refuses: claim each key once
                        SELECT DISTINCT ON (trace_id, metric)
                            trace_id, metric, :owner, now(), now() + make_interval(secs => :lease),
                            CAST(:owner_key AS bigint)
                        FROM candidates
                        ON CONFLICT (trace_id, metric) DO UPDATE
                            SET owner = excluded.owner, claimed_at = excluded.claimed_at,
                                lease_expires_at = excluded.lease_expires_at, owner_key = excluded.owner_key
                            -- taken over when its lease ran out or its owner is gone
                            WHERE NOT {held("judgeflow.claims")}
                        RETURNING trace_id, metric
                    )
                    SELECT c.*, (cl.trace_id IS NOT NULL) AS mine
                    FROM candidates c
                    LEFT JOIN claimed cl ON cl.trace_id = c.trace_id AND cl.metric = c.metric
                    ORDER BY c.created_at, c.trace_id, c.metric, c.tie_break
                    """
                ),
                params,
            ).mappings().all()
            # built inside the transaction: if this fails, the claims roll back
            # instead of sitting out the run as our own (invisible) claims
            items = _work_items(rows, settings.alert_segment_keys)
    except DBAPIError as exc:
        raise DatabaseError(f"could not claim traces: {type(exc.orig).__name__}: {exc.orig}") from None
    if not rows:
        return ClaimedBatch(items=[], cursor=None)
    last = rows[-1]
    return ClaimedBatch(
        items=items, cursor=Cursor(created_at=last["created_at"], trace_id=last["trace_id"], metric=last["metric"])
    )


@task(name="count-pending-work", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def count_pending_work(
    settings: Settings,
    metrics: list[str],
    since: datetime | None = None,
    until: datetime | None = None,
    sample_rate: float = 1.0,
    rescore_before: datetime | None = None,
    limit: int | None = None,
    settle_delay_s: float = 0.0,
    run_started: datetime | None = None,
    max_failed_runs: int | None = None,
) -> int:
    """How many (trace, metric) pairs a run would score now; drives the progress artifact."""
    try:
        with engine_for(settings).connect() as conn:
            source = _table_only(settings)
            counts = count_pending(
                conn, source, metrics, limit_pairs=None if limit is None else limit * len(metrics),
                since=since, until=until, sample_rate=sample_rate, rescore_before=rescore_before,
                settle_delay_s=settle_delay_s,
                run_started=run_started, max_failed_runs=max_failed_runs,
            )
    except DBAPIError as exc:
        raise DatabaseError(f"could not count pending traces: {exc.orig}") from None
    return sum(counts.values())


@task(name="count-pairs-left-to-other-runs", cache_policy=NO_CACHE, persist_result=False)
def count_left_to_other_runs(
    settings: Settings,
    owner: str,
    metrics: list[str],
    since: datetime | None = None,
    until: datetime | None = None,
    sample_rate: float = 1.0,
    rescore_before: datetime | None = None,
    settle_delay_s: float = 0.0,
    run_started: datetime | None = None,
    max_failed_runs: int | None = None,
) -> dict[str, int] | None:
    """Pairs in this run's scope, still without a done result, that other live
    runs hold: {flow run id: pairs}. None when the database cannot say (the
    summary then says so rather than claiming nothing was left)."""
    where, params = pending_where(
        since=since, until=until, sample_rate=sample_rate, rescore_before=rescore_before,
        settle_delay_s=settle_delay_s, exclude_held=False, run_started=run_started, max_failed_runs=max_failed_runs,
    )
    params.update(metrics=list(metrics), owner=owner)
    try:
        with engine_for(settings).connect() as conn:
            source = _table_only(settings)
            rows = conn.execute(
                text(
                    f"""
                    SELECT split_part(c.owner, ':', 1) AS run, count(*)
                    FROM {source.sql} t CROSS JOIN unnest(CAST(:metrics AS text[])) AS m(metric)
                    JOIN judgeflow.claims c ON c.trace_id = t.id::text AND c.metric = m.metric
                    WHERE {where} AND c.owner <> :owner AND {held("c")}
                    GROUP BY 1 ORDER BY 1
                    """
                ),
                params,
            ).all()
    except DBAPIError as exc:
        log.warning("could not count the pairs other runs hold: %s", exc.orig)
        return None
    return {run: n for run, n in rows}


def still_owned(settings: Settings, owner: str, items: list[TraceWork]) -> set[tuple[str, str]]:
    """The (trace, metric) pairs of ``items`` whose claim ``owner`` still holds
    (a run frozen past its lease may have lost some to another run), checked
    before paying for a judge call. A failed check answers "all of them": the
    write checks ownership again anyway."""
    keys = {(w.trace_id, w.metric) for w in items}
    try:
        with engine_for(settings).connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.trace_id, c.metric FROM judgeflow.claims c "
                    "JOIN unnest(CAST(:t AS text[]), CAST(:m AS text[])) AS k(trace_id, metric) "
                    "ON c.trace_id = k.trace_id AND c.metric = k.metric WHERE c.owner = :o"
                ),
                {"t": [k[0] for k in keys], "m": [k[1] for k in keys], "o": owner},
            ).all()
    except DBAPIError as exc:
        log.warning("could not check the run's claims before judging: %s", exc.orig)
        return keys
    return {(t, m) for t, m in rows}


_RELEASE_ALL = text("DELETE FROM judgeflow.claims WHERE owner = :o")
_RENEW = text("UPDATE judgeflow.claims SET lease_expires_at = now() + make_interval(secs => :l) WHERE owner = :o")


def release_claims(settings: Settings, owner: str) -> int:
    """Give back every claim ``owner`` still holds (end of run, or after a failure)."""
    with engine_for(settings).begin() as conn:
        return conn.execute(_RELEASE_ALL, {"o": owner}).rowcount


class LeaseKeeper:
    """The run's liveness, for as long as the ``with`` block lasts.

    On entry it opens a connection of its own (never one of the pool the tasks
    share, which a busy run can exhaust) and takes the session-level advisory
    lock ``(RUN_LOCK_NAMESPACE, owner_key)`` on it; claims are stamped with
    ``owner_key``. A thread on that connection renews ``owner``'s leases every
    third of the lease time, and reconnects (taking the lock again) if the
    database drops it. On exit it releases the claims the run still holds,
    then the lock. ``before_release`` runs first: it must return only once the
    run's in-flight work has finished or been cancelled, because a claim
    released under a running task lets another run judge the pair too."""

    def __init__(self, settings: Settings, owner: str, *, before_release: Callable[[], None] | None = None):
        self._settings = settings
        self._owner = owner
        self._before_release = before_release
        self.owner_key = secrets.randbelow(2**31 - 1) + 1  # an int4 > 0: pg_locks shows it as an oid
        self._engine = None
        self._conn: Connection | None = None
        self._locked = False
        self._conn_lock = threading.Lock()  # the connection is used by one thread at a time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="judgeflow-lease-keeper", daemon=True)

    def __enter__(self) -> "LeaseKeeper":
        self._engine = create_engine(
            normalise_database_url(database_url(self._settings)),
            poolclass=NullPool,
            connect_args={
                **CONNECT_ARGS,
                "application_name": f"judgeflow run lock {self.owner_key}",
                # notice a dead connection (and so a lost lock) within about a minute
                "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
            },
        )
        try:
            with self._conn_lock:
                self._connect()
                for _ in range(20):  # another live session holds this key: pick another
                    if self._locked:
                        break
                    self.owner_key = secrets.randbelow(2**31 - 1) + 1
                    self._try_lock()
                else:
                    raise DatabaseError("could not take a run lock: 20 random keys were all held")
        except DBAPIError as exc:
            self._close()
            raise DatabaseError(f"could not open the run's lock connection: {exc.orig}") from None
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._before_release is not None:
                # leases keep being renewed meanwhile: the work still owns its pairs
                self._before_release()
        finally:
            self._leave()

    def _leave(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if self._thread.is_alive() or not self._conn_lock.acquire(timeout=5):
            log.warning("the lease keeper of %s is stuck; releasing its claims on another connection", self._owner)
            self._release_on_pool()
            return
        try:
            try:
                if self._conn is None:
                    raise ConnectionError("no lock connection")
                self._conn.execute(_RELEASE_ALL, {"o": self._owner})
            except Exception:
                self._release_on_pool()
            self._close()  # ends the session, which also drops the lock
        finally:
            self._conn_lock.release()

    def _release_on_pool(self) -> None:
        try:
            release_claims(self._settings, self._owner)
        except Exception as error:  # the database may be the reason we are leaving
            log.warning(
                "could not release claims of %s: %s (they are free once this process ends, or when their lease "
                "expires)", self._owner, error,
            )

    def _connect(self) -> None:
        self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self._locked = False
        self._try_lock()

    def _try_lock(self) -> None:
        self._locked = bool(
            self._conn.execute(
                text("SELECT pg_try_advisory_lock(:ns, :k)"), {"ns": RUN_LOCK_NAMESPACE, "k": self.owner_key}
            ).scalar()
        )

    def _close(self) -> None:
        conn, self._conn, self._locked = self._conn, None, False
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
        if self._engine is not None:
            self._engine.dispose()

    def _tick(self) -> None:
        if self._conn is None:
            self._connect()
            log.warning("run lock connection of %s re-established", self._owner)
        if not self._locked:
            # after a reconnect the old session may still hold the lock until the
            # server notices it is gone: the claims look held meanwhile anyway
            self._try_lock()
        self._conn.execute(_RENEW, {"o": self._owner, "l": self._settings.lease_timeout_s})

    def _loop(self) -> None:
        interval = max(self._settings.lease_timeout_s / 3, 0.5)
        wait = interval
        while not self._stop.wait(wait):
            with self._conn_lock:
                try:
                    self._tick()
                    wait = interval
                except Exception as error:
                    log.warning("lease renewal of %s failed: %s; reconnecting", self._owner, error)
                    conn, self._conn, self._locked = self._conn, None, False
                    if conn is not None:
                        try:
                            conn.invalidate()
                        except Exception:
                            pass
                    wait = min(interval, 1.0)  # while the lock is lost, claims look free: hurry
