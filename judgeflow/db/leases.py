"""A run's hold on its claims: the lease keeper, and the ownership checks made
before paying for a judge call.

A claim (a row of ``judgeflow.claims``) is held while its lease runs *and* its
owner still holds its run lock (:func:`judgeflow.db.pending.held`).
:class:`LeaseKeeper` takes a session-level advisory lock on a connection of its
own when the run starts and keeps it until the run ends. A run killed mid-way
loses that connection and with it the lock, so the next run takes its claims
over at once. The keeper's thread renews the run's leases on the same
connection, so renewal depends on neither the judge, the task runner nor the
Prefect server; the lease only frees the claims of an owner that is alive but
stopped renewing (frozen, or cut off from the database without the server
noticing).

A run that may have lost claims re-checks a pair before its next judge call
(:func:`check_owned`, asked by the pair's gate, judgeflow/run/gate.py): after
its lock lapsed and came back, or when its lease has not been renewed within
its lifetime (the process was frozen, the keeper starved). Otherwise the
check costs no database round trip: :meth:`LeaseKeeper.fresh_until` is a
clock reading. The keeper is handed to whoever asks (the run's gate), never
looked up by owner.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from typing import Callable

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from judgeflow.db.engine import CONNECT_ARGS, database_url, engine_for
from judgeflow.db.pending import RUN_LOCK_NAMESPACE, held
from judgeflow.db.pooling import TRANSACTION, Pooling, pooling_for
from judgeflow.errors import DatabaseError
from judgeflow.config.settings import Settings, normalise_database_url
from judgeflow.model import TraceWork

log = logging.getLogger("judgeflow.claims")

# How often a run checks that it still holds its run lock. A lock lost (its
# server connection closed by a pooler or an administrator, the connection
# cut) is taken back, or a new one taken, within about this long; meanwhile
# other runs see the run's claims as free.
VERIFY_INTERVAL_S = 2.0

# A lease counts as possibly run out once this share of its lifetime has
# passed since its last renewal: the keeper's clock starts after the database
# stamped the expiry, and the margin covers the difference.
STALE_SHARE = 0.9

_RELEASE_ALL = text("DELETE FROM judgeflow.claims WHERE owner = :o")
# renewing also stamps the run's current lock key (None when it holds no lock)
_RENEW = text(
    "UPDATE judgeflow.claims SET lease_expires_at = now() + make_interval(secs => :l), "
    "owner_key = CAST(:k AS bigint) WHERE owner = :o"
)
_RESTAMP = text(
    "UPDATE judgeflow.claims SET owner_key = CAST(:k AS bigint) "
    "WHERE owner = :o AND owner_key IS DISTINCT FROM CAST(:k AS bigint)"
)
# the backend holding the run lock (None: nobody), and this session's backend
_LOCK_HOLDER = text(
    "SELECT (SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
    "AND l.classid = CAST(CAST(:ns AS int) AS oid) AND l.objid = CAST(CAST(:k AS int) AS oid) LIMIT 1), "
    "pg_backend_pid()"
)

_STILL_OWNED_RETRIES = (0.5, 1.0, 2.0, 4.0)  # seconds between tries: rides through a database restart


def still_owned(settings: Settings, owner: str, items: list[TraceWork],
                keeper: "LeaseKeeper | None" = None) -> set[tuple[str, str]]:
    """The (trace, metric) pairs of ``items`` whose claim ``owner`` still holds:
    its own, with the lease running and the run lock live. A lease of the run's
    ``keeper`` that may have run out is renewed first: claims nobody took
    meanwhile are the run's again. Never answers "all of them" on a failure: a
    check that keeps failing raises :class:`DatabaseError`."""
    if keeper is not None:
        keeper.renew_if_stale()
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


def check_owned(settings: Settings, owner: str, work: TraceWork, keeper: "LeaseKeeper | None"
                ) -> tuple[bool, float]:
    """(whether ``owner`` still holds ``work``'s pair, the ``time.time()`` just
    before the database was asked), the keeper's lease renewed first if it may
    have run out: a lapse the renewal itself ends is then behind the check."""
    if keeper is not None:
        keeper.renew_if_stale()
    checked_at = time.time()
    return (work.trace_id, work.metric) in still_owned(settings, owner, [work]), checked_at


def release_claims(settings: Settings, owner: str) -> int:
    """Give back every claim ``owner`` still holds (end of run, or after a failure)."""
    with engine_for(settings).begin() as conn:
        return conn.execute(_RELEASE_ALL, {"o": owner}).rowcount


class LeaseKeeper:
    """The run's liveness, for as long as the ``with`` block lasts.

    On entry it opens a connection of its own (never one of the pool the tasks
    share, which a busy run can exhaust) and finds out what is between it and
    PostgreSQL (:func:`judgeflow.db.pooling.pooling_for`).

    Directly or through a session pool it takes the session-level advisory lock
    ``(RUN_LOCK_NAMESPACE, owner_key)`` on that connection; claims are stamped
    with ``owner_key``. Its thread checks every :data:`VERIFY_INTERVAL_S` that
    the lock is still this session's. If the connection dropped, it reconnects
    and takes the lock back, or a new key, and re-stamps the run's claims. If
    the lock is held by another backend while the connection never dropped,
    the pool hands out server connections per transaction after all: the run
    switches to leases alone and unlocks nothing on a backend it does not hold.

    Behind a transaction pool the run takes no lock, its ``owner_key`` is None
    and its claims are held by their lease alone.

    Either way the thread renews ``owner``'s leases every third of the lease
    time. A lapse (lock lost, or no renewal within the lease's lifetime) makes
    the run's batches claimed before check each pair before its next judge
    call (:meth:`at_risk`, :func:`check_owned`). On exit it releases the claims the run still
    holds, then the lock. ``before_release`` runs first: it must return only
    once the run's in-flight work has finished or been cancelled, because a
    claim released under a running task lets another run judge the pair too."""

    def __init__(self, settings: Settings, owner: str, *, before_release: Callable[[], None] | None = None):
        self._settings = settings
        self._owner = owner
        self._before_release = before_release
        self._lease_s = settings.lease_timeout_s
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
        self._at_risk_since: float | None = None  # time.time() the run last held its claims again
        self._restamp_until = 0.0  # re-stamp claims made with an old key until then (time.monotonic())

    @staticmethod
    def _new_key() -> int:
        return secrets.randbelow(2**31 - 1) + 1  # an int4 > 0: pg_locks shows it as an oid

    @property
    def uses_lock(self) -> bool:
        return self.pooling is None or self.pooling.session_locks_hold

    def lease_stale(self) -> bool:
        """Whether the run's leases may have run out: not renewed within their lifetime."""
        return time.monotonic() - self._renewed_at >= STALE_SHARE * self._lease_s

    def at_risk(self, claimed_at: float | None) -> bool:
        """Whether claims the run took at ``claimed_at`` (time.time(); None:
        unknown) may have moved to another run, so must be checked before
        judging: its lock or lease lapsed since, or its lease is not known to
        be renewed now. No database round trip."""
        if self._lost:  # the lock (or lease) is gone now: until it is back, no claim is sure
            return True
        since = self._at_risk_since
        lapsed = since is not None and (claimed_at is None or claimed_at < since)
        return lapsed or self.lease_stale()

    def fresh_until(self, claimed_at: float | None) -> float:
        """The ``time.monotonic()`` until which claims taken at ``claimed_at``
        are not at risk: ``at_risk(claimed_at)`` is ``time.monotonic() >=
        fresh_until(claimed_at)``; -inf once they are. A clock read."""
        since = self._at_risk_since
        if self._lost or (since is not None and (claimed_at is None or claimed_at < since)):
            return -math.inf
        return self._renewed_at + STALE_SHARE * self._lease_s

    def renew_if_stale(self) -> None:
        """Renew now (from the caller's thread) if the leases may have run out:
        claims nobody took meanwhile are the run's again, and batches claimed
        until now check their pairs."""
        with self._conn_lock:
            if not self.lease_stale() or self._conn is None:
                return
            try:
                self._lapsed()
                self._renew()
                self._back()
            except Exception as error:  # the keeper's thread reconnects; the check reads the database anyway
                log.warning("could not renew the leases of %s before judging: %s", self._owner, error)

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
            self.pooling = pooling_for(self._settings, self._engine)
            log.info("database connection: %s (%s); %s", self.pooling.mode, self.pooling.evidence,
                     self.pooling.consequence)
            with self._conn_lock:
                self._open()
        except DBAPIError as exc:
            self._close()
            raise DatabaseError(f"could not open the run's lock connection: {exc.orig}") from None
        self._renewed_at = time.monotonic()
        self._thread.start()
        return self

    def _open(self) -> None:
        if not self.uses_lock:
            self.owner_key = None
        self._connect()
        if self.uses_lock:
            for _ in range(20):  # another live session holds this key: pick another
                if self._locked:
                    return
                self.owner_key = self._new_key()
                self._try_lock()
            raise DatabaseError("could not take a run lock: 20 random keys were all held")

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

    def _lock_holder(self) -> tuple[int | None, int]:
        """(the backend holding the run lock or None, this session's backend)."""
        holder, mine = self._conn.execute(_LOCK_HOLDER, {"ns": RUN_LOCK_NAMESPACE, "k": self.owner_key}).one()
        return holder, mine

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
            self._at_risk_since = time.time()
            log.warning("run %s holds its claims again (key %s); pairs another run took meanwhile are not "
                        "judged here", self._owner, self.owner_key)

    def _renew(self) -> None:
        self._conn.execute(_RENEW, {"o": self._owner, "l": self._lease_s, "k": self.owner_key})
        self._renewed_at = time.monotonic()

    def _to_leases(self, holder: int, mine: int) -> None:
        """The lock sits on another backend although this connection never
        dropped: server connections are handed out per transaction. The run
        holds its claims by lease from now on; the lock is left where it is
        (unlocking works only from the backend that holds it, which belongs to
        another client now) and goes when the pooler closes that connection."""
        # the key goes before the mode is published: a reader that sees the
        # transaction pool sees no run key with it
        self.owner_key, self._locked = None, False
        self.pooling = Pooling(TRANSACTION, f"the run lock taken on backend {holder} was not on this "
                                            f"connection's backend {mine} at its next transaction")
        log.warning("run %s: database connection is a %s (%s); %s", self._owner, self.pooling.mode,
                    self.pooling.evidence, self.pooling.consequence)
        self._renew()  # stamps the claims with no key: held by lease alone

    def _check_lock(self) -> None:
        """The run lock is this session's, or is taken back (or a new one taken)."""
        if self._locked:
            holder, mine = self._lock_holder()
            if holder == mine:
                return
            if holder is not None:
                self._to_leases(holder, mine)
                return
        self._lapsed()
        self._try_lock()  # the old session may hold it until the server notices it is gone
        if not self._locked:
            self.owner_key = self._new_key()
            self._try_lock()
        if not self._locked:
            raise DatabaseError("could not take a run lock back")

    def _tick(self, renew_due: bool) -> None:
        if self._conn is None:
            self._connect()  # takes the run lock again with its key, if it can
            log.warning("run lock connection of %s re-established", self._owner)
        if self.lease_stale():
            self._lapsed()  # frozen or starved past the lease: another run may have taken claims over
        if self.uses_lock:
            self._check_lock()
            if self._lost and self.uses_lock:
                # claims stamped with an old key, also by a claim in flight now, take the current one
                self._restamp_until = time.monotonic() + 30
        if self._lost:
            self._renew()
            self._back()
            return
        if self.uses_lock and time.monotonic() < self._restamp_until:
            self._conn.execute(_RESTAMP, {"o": self._owner, "k": self.owner_key})
        if renew_due:
            self._renew()

    def _loop(self) -> None:
        renew_every = max(self._lease_s / 3, 0.5)
        next_renewal = time.monotonic() + renew_every
        pause = self._wait(renew_every)
        while not self._stop.wait(pause):
            with self._conn_lock:
                try:
                    due = time.monotonic() >= next_renewal
                    self._tick(due)
                    if due:
                        next_renewal = time.monotonic() + renew_every
                    pause = self._wait(renew_every)
                except Exception as error:
                    self._failed(error)
                    pause = min(self._wait(renew_every), 0.5)  # while the lock is lost, claims look free: hurry

    def _wait(self, renew_every: float) -> float:
        return min(VERIFY_INTERVAL_S, renew_every) if self.uses_lock else renew_every

    def _failed(self, error: Exception) -> None:
        log.warning("run lock / lease renewal of %s failed: %s; reconnecting", self._owner, error)
        conn, self._conn, self._locked = self._conn, None, False
        if conn is not None:
            try:
                conn.invalidate()
            except Exception:
                pass
        if self.uses_lock or self.lease_stale():
            self._lapsed()  # the lock went with the connection; a lease unrenewed this long may have run out
