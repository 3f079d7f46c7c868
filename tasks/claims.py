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
import time
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
from judgeflow.db.pooling import Pooling, detect_pooling
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


_STILL_OWNED_RETRIES = (0.5, 1.0, 2.0, 4.0)  # seconds between tries: rides through a database restart


def still_owned(settings: Settings, owner: str, items: list[TraceWork]) -> set[tuple[str, str]]:
    """The (trace, metric) pairs of ``items`` whose claim ``owner`` still holds:
    its own, with the lease running and the run lock live (a run frozen past
    its lease, or whose lock lapsed, may have lost some to another run),
    checked before paying for a judge call. Never answers "all of them" on a
    failure: a check that keeps failing raises :class:`DatabaseError`."""
    keys = {(w.trace_id, w.metric) for w in items}
    query = text(
        "SELECT c.trace_id, c.metric FROM judgeflow.claims c "
        "JOIN unnest(CAST(:t AS text[]), CAST(:m AS text[])) AS k(trace_id, metric) "
        f"ON c.trace_id = k.trace_id AND c.metric = k.metric WHERE c.owner = :o AND {held('c')}"
    )
    params = {"t": [k[0] for k in keys], "m": [k[1] for k in keys], "o": owner}
    for attempt, delay in enumerate((*_STILL_OWNED_RETRIES, None)):
        try:
            with engine_for(settings).connect() as conn:
                return {(t, m) for t, m in conn.execute(query, params).all()}
        except DBAPIError as exc:
            if delay is None:
                raise DatabaseError(f"could not check the run's claims before judging: {exc.orig}") from None
            log.warning("could not check the run's claims before judging (try %d): %s", attempt + 1, exc.orig)
            time.sleep(delay)
    raise AssertionError("unreachable")


# Process-local: when each run's claims last may have moved to another run
# (time.time() its keeper had the run lock back, or its lease renewed again,
# after losing it). A batch claimed before then re-checks each pair before
# judging it (tasks/scoring.py).
_claims_at_risk_until: dict[str, float] = {}


def claims_at_risk(owner: str, claimed_at: float | None) -> bool:
    """Whether claims ``owner`` took at ``claimed_at`` (time.time(); None: unknown)
    may have moved to another run since, so must be checked before judging."""
    until = _claims_at_risk_until.get(owner)
    return until is not None and (claimed_at is None or claimed_at < until)


_RELEASE_ALL = text("DELETE FROM judgeflow.claims WHERE owner = :o")
# renewing also stamps the run's current lock key (None behind a transaction pool)
_RENEW = text(
    "UPDATE judgeflow.claims SET lease_expires_at = now() + make_interval(secs => :l), "
    "owner_key = CAST(:k AS bigint) WHERE owner = :o"
)
_RESTAMP = text(
    "UPDATE judgeflow.claims SET owner_key = CAST(:k AS bigint) "
    "WHERE owner = :o AND owner_key IS DISTINCT FROM CAST(:k AS bigint)"
)


def release_claims(settings: Settings, owner: str) -> int:
    """Give back every claim ``owner`` still holds (end of run, or after a failure)."""
    with engine_for(settings).begin() as conn:
        return conn.execute(_RELEASE_ALL, {"o": owner}).rowcount


# How often a run checks that it still holds its run lock. A lock lost (its
# server connection closed by a pooler or an administrator, the connection
# cut) is taken back, or a new one taken, within about this long; meanwhile
# other runs see the run's claims as free.
VERIFY_INTERVAL_S = 2.0


class LeaseKeeper:
    """The run's liveness, for as long as the ``with`` block lasts.

    On entry it opens a connection of its own (never one of the pool the tasks
    share, which a busy run can exhaust) and finds out what is between it and
    PostgreSQL (:mod:`judgeflow.db.pooling`).

    Directly or through a session pool it takes the session-level advisory lock
    ``(RUN_LOCK_NAMESPACE, owner_key)`` on that connection; claims are stamped
    with ``owner_key``. Its thread checks every :data:`VERIFY_INTERVAL_S` that
    the lock is still this session's, and if it is not (connection dropped,
    server connection closed) reconnects and takes it back, or takes a new key
    and re-stamps the run's claims with it; from then on the run's batches
    claimed before check each pair before judging it (:func:`claims_at_risk`).

    Behind a transaction pool a session lock lives on a server connection that
    is another client's between two transactions: the run takes none, its
    ``owner_key`` is None and its claims are held by their lease alone.

    Either way the thread renews ``owner``'s leases every third of the lease
    time. On exit it releases the claims the run still holds, then the lock.
    ``before_release`` runs first: it must return only once the run's in-flight
    work has finished or been cancelled, because a claim released under a
    running task lets another run judge the pair too."""

    def __init__(self, settings: Settings, owner: str, *, before_release: Callable[[], None] | None = None):
        self._settings = settings
        self._owner = owner
        self._before_release = before_release
        self.owner_key: int | None = self._new_key()
        self.pooling: Pooling | None = None
        self._engine = None
        self._conn: Connection | None = None
        self._locked = False
        self._conn_lock = threading.Lock()  # the connection is used by one thread at a time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="judgeflow-lease-keeper", daemon=True)
        self._renewed_at = time.monotonic()  # the last renewal that reached the database
        self._lost = False  # the lock (or the lease) lapsed and is not back yet
        self._restamp_until = 0.0  # re-stamp claims made with an old key until then (time.monotonic())

    @staticmethod
    def _new_key() -> int:
        return secrets.randbelow(2**31 - 1) + 1  # an int4 > 0: pg_locks shows it as an oid

    @property
    def uses_lock(self) -> bool:
        return self.pooling is None or self.pooling.session_locks_hold

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
            self.pooling = detect_pooling(self._engine)
            log.info("database connection: %s (%s); %s", self.pooling.mode, self.pooling.evidence,
                     self.pooling.consequence)
            with self._conn_lock:
                if not self.uses_lock:
                    self.owner_key = None
                self._connect()
                if self.uses_lock:
                    for _ in range(20):  # another live session holds this key: pick another
                        if self._locked:
                            break
                        self.owner_key = self._new_key()
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
        _claims_at_risk_until.pop(self._owner, None)
        if self._thread.is_alive() or not self._conn_lock.acquire(timeout=5):
            log.warning("the lease keeper of %s is stuck; releasing its claims on another connection", self._owner)
            self._release_on_pool()
            return
        try:
            try:
                if self._conn is None:
                    raise ConnectionError("no lock connection")
                self._conn.execute(_RELEASE_ALL, {"o": self._owner})
                if self._locked:
                    # unlocked here rather than by the session's end: a closed
                    # connection's backend exits after the client has moved on
                    self._conn.execute(
                        text("SELECT pg_advisory_unlock(:ns, :k)"), {"ns": RUN_LOCK_NAMESPACE, "k": self.owner_key}
                    )
            except Exception:
                self._release_on_pool()
            self._close()  # ends the session, which also drops the lock if the unlock did not run
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
        if self.uses_lock:
            self._try_lock()

    def _try_lock(self) -> None:
        self._locked = bool(
            self._conn.execute(
                text("SELECT pg_try_advisory_lock(:ns, :k)"), {"ns": RUN_LOCK_NAMESPACE, "k": self.owner_key}
            ).scalar()
        )

    def _lock_is_mine(self) -> bool:
        """Whether this connection's session holds the run lock now."""
        return bool(
            self._conn.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND objsubid = 2 AND classid = CAST(CAST(:ns AS int) AS oid) "
                    "AND objid = CAST(CAST(:k AS int) AS oid) AND pid = pg_backend_pid())"
                ),
                {"ns": RUN_LOCK_NAMESPACE, "k": self.owner_key},
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

    def _lapsed(self) -> None:
        if not self._lost:
            self._lost = True
            log.warning("run %s lost its %s: its claims look free to other runs until it is back", self._owner,
                        "run lock" if self.uses_lock else "leases")

    def _back(self) -> None:
        """The lock (or lease) is back: batches claimed until now check their pairs before judging them."""
        if self._lost:
            self._lost = False
            _claims_at_risk_until[self._owner] = time.time()
            log.warning("run %s holds its claims again (key %s); pairs another run took meanwhile are not "
                        "judged here", self._owner, self.owner_key)

    def _renew(self) -> None:
        self._conn.execute(_RENEW, {"o": self._owner, "l": self._settings.lease_timeout_s, "k": self.owner_key})
        self._renewed_at = time.monotonic()

    def _tick(self, renew_due: bool) -> None:
        if self._conn is None:
            self._connect()  # takes the run lock again with its key, if it can
            log.warning("run lock connection of %s re-established", self._owner)
        if self.uses_lock:
            if not (self._locked and self._lock_is_mine()):
                self._lapsed()
                self._try_lock()  # the old session may hold it until the server notices it is gone
                if not self._locked:
                    self.owner_key = self._new_key()
                    self._try_lock()
                if not self._locked:
                    raise DatabaseError("could not take a run lock back")
            if self._lost:
                # claims stamped with an old key, also by a claim in flight now, take the current one
                self._restamp_until = time.monotonic() + 30
                self._renew()
                self._back()
                return
            if time.monotonic() < self._restamp_until:
                self._conn.execute(_RESTAMP, {"o": self._owner, "k": self.owner_key})
        elif self._lost:
            self._renew()
            self._back()
            return
        if renew_due:
            self._renew()

    def _loop(self) -> None:
        lease = self._settings.lease_timeout_s
        renew_every = max(lease / 3, 0.5)
        wait = min(VERIFY_INTERVAL_S, renew_every) if self.uses_lock else renew_every
        pause = wait
        next_renewal = time.monotonic() + renew_every
        while not self._stop.wait(pause):
            with self._conn_lock:
                try:
                    due = time.monotonic() >= next_renewal
                    self._tick(due)
                    if due:
                        next_renewal = time.monotonic() + renew_every
                    pause = wait
                except Exception as error:
                    log.warning("run lock / lease renewal of %s failed: %s; reconnecting", self._owner, error)
                    conn, self._conn, self._locked = self._conn, None, False
                    if conn is not None:
                        try:
                            conn.invalidate()
                        except Exception:
                            pass
                    if self.uses_lock or time.monotonic() - self._renewed_at >= lease:
                        self._lapsed()  # the lock went with the connection; a lease unrenewed this long ran out
                    pause = min(wait, 0.5)  # while the lock is lost, claims look free: hurry
