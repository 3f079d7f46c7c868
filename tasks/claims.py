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
import math
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
from judgeflow.db.pairs import Done, claim_keys, failed_keys
from judgeflow.db.pending import RUN_LOCK_NAMESPACE, held
from judgeflow.db.pending_work import count_plan_pending
from judgeflow.db.pooling import Pooling, detect_pooling
from judgeflow.db.result_counts import compact_result_counts
from judgeflow.settings import normalise_database_url
from judgeflow.db.source import SAMPLE_SQL
from judgeflow.db.trace_source import KeyFilter, TraceKey, read_bodies, source_engine, trace_source
from judgeflow.db.watermark import ReadPlan, advance, plan_reads
from judgeflow.errors import DatabaseError
from judgeflow.settings import Settings
from judgeflow.tasks.work import ClaimedBatch, Cursor, TraceWork

log = logging.getLogger("judgeflow.claims")


def _work_items(keys, claimed, read, segment_keys: tuple[str, ...] = ()) -> tuple[list[TraceWork], list]:
    """Our claimed pairs as work, with their trace read by key; a trace that
    could not be read is work carrying the database's error (stored as a
    failed ``invalid_trace`` result). Also the pairs whose trace the source
    no longer shows (deleted, or not yet on a lagging replica): given back."""
    items: list[TraceWork] = []
    gone = []
    for index, metric, mine in claimed:
        if not mine:
            continue
        key = keys[index]
        body = read.bodies.get(key.id)
        if body is not None:
            items.append(TraceWork(
                trace_id=key.id, metric=metric, created_at=body.created_at, input=body.input, output=body.output,
                context=body.context, metadata=body.metadata, segment=segment_values(body.metadata, segment_keys),
                skip_reason=body.skip,
            ))
        elif key.id in read.errors:
            items.append(TraceWork(trace_id=key.id, metric=metric, created_at=key.created_at,
                                   read_error=read.errors[key.id]))
        else:
            gone.append((key.id, metric))
    return items, gone


# keys looked at per source read: a window's already scored rows (the
# look-back) are passed over this many at a time
KEY_PAGE_MIN = 1000


@task(name="plan-source-reads", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def plan_source_reads(
    settings: Settings, metrics: list[str], *, sample_rate: float = 1.0, ranged: bool = False,
) -> ReadPlan:
    """Where this run reads the source from: its watermark minus the look-back
    (judgeflow/db/watermark.py), or everything (no watermark yet) or exactly
    its --since/--until range (``ranged``)."""
    try:
        with engine_for(settings).connect() as conn:
            return plan_reads(
                conn, trace_source(settings), metrics, lookback_s=settings.source_lookback_s,
                sample_rate=sample_rate, settle_delay_s=settings.settle_delay_s, ranged=ranged,
            )
    except DBAPIError as exc:
        raise DatabaseError(f"could not read the watermarks: {exc.orig}") from None


@task(name="advance-watermark", cache_policy=NO_CACHE, persist_result=False)
def advance_watermark(
    settings: Settings, plan: ReadPlan, metrics: list[str], *, sample_rate: float = 1.0,
    flow_run_id: str | None = None,
) -> dict[str, datetime | None] | None:
    """Move the watermarks past what is now scored, never past a pair still
    without a result. Never fails the run: None when it could not (the next
    run then reads from the old watermark: more reads, nothing missed)."""
    try:
        with engine_for(settings).begin() as conn:
            # the result counts `judgeflow status` reads: one row per group again
            compact_result_counts(conn)
        with engine_for(settings).begin() as conn:
            return advance(conn, source_engine(settings), trace_source(settings), plan, metrics,
                           sample_rate=sample_rate, flow_run_id=flow_run_id)
    except Exception as error:  # a report: the watermark only ever saves reads
        log.warning("could not move the watermark: %s", error)
        return None


def _release(settings: Settings, owner: str, pairs: list[tuple[str, str]]) -> None:
    if pairs:
        with engine_for(settings).begin() as conn:
            conn.execute(
                text(
                    "DELETE FROM judgeflow.claims c USING unnest(CAST(:t AS text[]), CAST(:m AS text[])) "
                    "AS k(trace_id, metric) WHERE c.trace_id = k.trace_id AND c.metric = k.metric AND c.owner = :o"
                ),
                {"t": [t for t, _ in pairs], "m": [m for _, m in pairs], "o": owner},
            )


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
    plan: ReadPlan | None = None,
    not_sampled_done: bool = False,
) -> ClaimedBatch:
    """Claim up to ``batch_size`` pending (trace, metric) pairs after ``cursor``,
    oldest first, and return them with their trace content. ``owner_key`` is
    the key of the run lock ``owner`` holds (:class:`LeaseKeeper`); without
    one the claims live by their lease alone. ``plan``: where the run reads
    (:func:`plan_source_reads`); None reads the whole source.

    Keys (id and time) are read from the source a page at a time and their
    pairs claimed on judgeflow's database by primary key; then the claimed
    traces are read by key (judgeflow/db/trace_source.py: a row that cannot be
    read becomes a failed ``invalid_trace`` result, the others are scored).
    With a plan that has a window, failed pairs older than it come first
    (phase "retry", from eval_results), then the window's keys."""
    done = Done(run_started=run_started, max_failed_runs=max_failed_runs, rescore_before=rescore_before,
                not_sampled_done=not_sampled_done)
    n_keys = max(1, math.ceil(batch_size / max(len(metrics), 1)))
    page = max(4 * n_keys, KEY_PAGE_MIN)
    source = trace_source(settings)
    lo = plan.lo if plan is not None else None
    phase = cursor.phase if cursor is not None else ("retry" if lo is not None else "window")
    after = (cursor.created_at, cursor.trace_id) if cursor is not None else None
    try:
        while True:
            if phase == "retry":
                with engine_for(settings).connect() as conn:
                    keys = failed_keys(conn, metrics, before=lo, done=done, sample_rate=sample_rate, after=after,
                                       limit=page)
            else:
                f = KeyFilter(lo=lo, since=since, until=until, settle_delay_s=settle_delay_s,
                              sample_rate=sample_rate, after=after)
                sql, params = source.keys_sql(f)
                with source_engine(settings).connect() as conn:
                    keys = [TraceKey(i, at) for i, at in conn.execute(text(sql), {**params, "limit": page}).all()]
            if not keys:
                if phase == "retry":
                    phase, after = "window", None
                    continue
                return ClaimedBatch(items=[], cursor=None)
            # autocommit, one statement: a process frozen between a statement and
            # its COMMIT would hold the new claims' row locks, and another run
            # trying to take them over would wait on it for as long as it is frozen
            with engine_for(settings).connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                claimed, whole = claim_keys(
                    conn, keys, metrics, n_keys=n_keys, done=done, owner=owner, owner_key=owner_key,
                    lease_s=settings.lease_timeout_s,
                )
            last = keys[-1] if whole else keys[max(index for index, _, _ in claimed)]
            after = (last.created_at, last.id)
            if claimed:
                break
            if len(keys) < page:  # this phase is read to its end
                if phase == "retry":
                    phase, after = "window", None
                    continue
                return ClaimedBatch(items=[], cursor=None)
    except DBAPIError as exc:
        raise DatabaseError(f"could not claim traces: {type(exc.orig).__name__}: {exc.orig}") from None
    mine = [(keys[index].id, metric) for index, metric, is_mine in claimed if is_mine]
    wanted = list(dict.fromkeys(keys[index] for index, _, is_mine in claimed if is_mine))
    try:
        read = read_bodies(source, source_engine(settings), wanted)
    except Exception as exc:
        # not any one row's fault (a lost connection, a missing column): the
        # claims go back at once, and the task's retry (or the next run) reads again
        try:
            _release(settings, owner, mine)
        except Exception:  # they die with the run's lock in any case
            pass
        orig = getattr(exc, "orig", exc)
        raise DatabaseError(f"could not read traces from {source.display}: {type(orig).__name__}: {orig}") from None
    if read.errors:
        log.warning("%d trace(s) of %s could not be read and are recorded as failed: %s", len(read.errors),
                    source.display, "; ".join(f"{k}: {v}" for k, v in list(read.errors.items())[:5]))
    items, gone = _work_items(keys, claimed, read, settings.alert_segment_keys)
    if gone:
        log.info("%d claimed pair(s) whose trace %s no longer shows were given back", len(gone), source.display)
        _release(settings, owner, gone)
    return ClaimedBatch(
        items=items, cursor=Cursor(created_at=after[0], trace_id=after[1], metric="", phase=phase)
    )


def _count_kwargs(since, until, sample_rate, settle_delay_s) -> dict:
    return dict(since=since, until=until, sample_rate=sample_rate, settle_delay_s=settle_delay_s)


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
    plan: ReadPlan | None = None,
    not_sampled_done: bool = False,
) -> int:
    """How many (trace, metric) pairs a run would score now, in what it reads
    (``plan``); drives the progress artifact."""
    if plan is None:
        with engine_for(settings).connect() as conn:
            plan = plan_reads(conn, trace_source(settings), metrics, lookback_s=settings.source_lookback_s,
                              sample_rate=sample_rate, ranged=True)
    try:
        counts = count_plan_pending(
            trace_source(settings), source_engine(settings), engine_for(settings), plan, metrics,
            done=Done(run_started=run_started, max_failed_runs=max_failed_runs, rescore_before=rescore_before,
                      not_sampled_done=not_sampled_done),
            limit_pairs=None if limit is None else limit * len(metrics),
            **_count_kwargs(since, until, sample_rate, settle_delay_s),
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
    plan: ReadPlan | None = None,
    not_sampled_done: bool = False,
) -> dict[str, int] | None:
    """Pairs of these metrics (in the sample), still without a done result,
    that other live runs hold: {flow run id: pairs}; read from the claims
    alone (no source read: a claim does not keep its trace's time, so
    --since/--until do not narrow it). None when the database cannot say
    (the summary then says so rather than claiming nothing was left)."""
    cond, params = Done(run_started=run_started, max_failed_runs=max_failed_runs,
                        rescore_before=rescore_before).sql()
    params.update(metrics=list(metrics), owner=owner)
    sample = ""
    if sample_rate < 1.0:
        sample = " AND " + SAMPLE_SQL.format(id="c.trace_id")
        params["rate"] = sample_rate
    try:
        with engine_for(settings).connect() as conn:
            rows = conn.execute(
                text(
                    f"""
                    SELECT split_part(c.owner, ':', 1) AS run, count(*)
                    FROM judgeflow.claims c
                    WHERE c.metric = ANY(CAST(:metrics AS text[])) AND c.owner <> :owner AND {held("c")}{sample}
                      AND NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r
                                      WHERE r.trace_id = c.trace_id AND r.metric = c.metric AND {cond})
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
