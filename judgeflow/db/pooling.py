"""What sits between judgeflow and PostgreSQL: nothing, a pool that keeps one
server connection per client connection (PgBouncer's ``pool_mode =
session``), or a pool that hands out a server connection per transaction
(``pool_mode = transaction``, and managed poolers that behave like it;
``statement`` pooling refuses multi-statement transactions, which judgeflow's
writes need).

It matters for one thing: a run's liveness. A session-level advisory lock
lives on a server connection; behind a transaction pool that connection is
another client's between two transactions, and the pooler closes it at its
own pace (``server_lifetime``, ``server_idle_timeout``), so a run's lock can
vanish under it, or outlive it.

``JUDGEFLOW_POOL_MODE`` (``direct``, ``session``, ``transaction``) says which
it is; ``auto`` (the default) finds out by what the connection does, since
``SHOW pool_mode`` is PgBouncer's admin console only:

1. client connection A runs a transaction and notes its server's backend pid;
2. another client connection opens a transaction, notes its backend pid and
   keeps it open (its server connection is taken meanwhile);
3. A runs another transaction and notes its backend pid;
4. steps 2 and 3 are repeated with up to :data:`PROBE_HOLDERS` connections
   held at once.

Behind a transaction pool, A's server connection goes back to the pool after
each transaction: a holder gets it, or A's next transaction runs on another
one. Either shows as a pid that changed hands. One holder is not enough: a
pool that hands idle server connections out in turn (PgBouncer's
``server_round_robin = 1``) gives it another idle one and A its own again,
which the next holder, or A's next turn, then shows. Directly, or through a
session pool, A keeps its backend and each holder has its own.
A direct connection and a session pool are told apart by the client
address: the server sees the pooler's socket, not ours.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass

from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, text

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings

DIRECT = "direct"
SESSION = "session pool"
TRANSACTION = "transaction pool"

# what judgeflow does about it, as `judgeflow db check` and the run log say
CONSEQUENCE = {
    DIRECT: "each run holds a session advisory lock on a connection of its own, re-checked every few "
            "seconds; a run that dies frees its claims at once",
    SESSION: "each run holds a session advisory lock on a connection of its own (the pool keeps its server "
             "connection for it), re-checked every few seconds; a run that dies frees its claims at once",
    TRANSACTION: "session locks do not survive a transaction here: runs hold their claims by lease alone, "
                 "renewed every third of JUDGEFLOW_LEASE_TIMEOUT_S; a run that dies leaves its claims "
                 "until their lease runs out",
}

# how long a holder may wait for a server connection: a full session pool keeps it waiting (A holds one
# for as long as it is connected), a transaction pool hands it A's at once
_WAIT_FOR_SERVER_S = 5.0

# connections holding a transaction open at once, at most, before the probe concludes that A keeps its
# server connection: each one takes one more idle server connection of a transaction pool
PROBE_HOLDERS = 4

# JUDGEFLOW_POOL_MODE's values, and the mode each names
SETTING_MODES = {"direct": DIRECT, "session": SESSION, "transaction": TRANSACTION}


@dataclass(frozen=True)
class Pooling:
    mode: str  # DIRECT | SESSION | TRANSACTION
    evidence: str

    @property
    def session_locks_hold(self) -> bool:
        return self.mode != TRANSACTION

    @property
    def consequence(self) -> str:
        return CONSEQUENCE[self.mode]


def _pid(conn: Connection) -> int:
    return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _local_endpoint(conn: Connection) -> tuple[str, int] | None:
    """Our end of ``conn``'s socket, or None over a Unix socket."""
    fd = conn.connection.dbapi_connection.pgconn.socket
    sock = socket.socket(fileno=os.dup(fd))
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        address = sock.getsockname()
        return address[0], address[1]
    finally:
        sock.close()


class _Holder:
    """A client connection of ``engine`` that holds a transaction open (and
    with it a server connection) until :meth:`let_go`, on a thread of its own."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.pid: int | None = None
        self._taken = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="judgeflow-pool-probe", daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        try:
            with self._engine.connect() as conn:
                with conn.begin():
                    self.pid = _pid(conn)
                    self._taken.set()
                    self._done.wait(_WAIT_FOR_SERVER_S)
        except Exception:  # no server connection for it: the probe reads that as "not per transaction"
            pass
        finally:
            self._taken.set()

    def wait_for_server(self) -> bool:
        """Whether it got a server connection in time."""
        self._taken.wait(_WAIT_FOR_SERVER_S)
        return self.pid is not None

    def let_go(self) -> None:
        self._done.set()
        self._thread.join(_WAIT_FOR_SERVER_S)


def _changed_hands(engine: Engine, a: Connection, first: int) -> str | None:
    """Evidence that A's server backend ``first`` is handed out per
    transaction (steps 2-4 of the module doc), or None."""
    holders: list[_Holder] = []
    try:
        for _ in range(PROBE_HOLDERS):
            holder = _Holder(engine)
            holders.append(holder)
            if not holder.wait_for_server():
                return None  # a pool that makes a client wait keeps A's server connection for A
            if holder.pid == first:
                return f"another client got this client connection's server backend (pid {first}) between two " \
                       "of its transactions"
            now = _pid(a)
            if now != first:
                return f"a client connection's server backend changed between two of its transactions " \
                       f"(pid {first}, then {now})"
        return None
    finally:
        for holder in holders:
            holder.let_go()


def detect_pooling(engine: Engine) -> Pooling:
    """Which of the three sits behind ``engine``'s URL (see the module doc).
    Takes up to ``1 + PROBE_HOLDERS`` connections of ``engine`` for a few
    milliseconds; best a NullPool engine of its own (a full session pool may
    keep a holder waiting, and it is then left to the pooler's wait timeout)."""
    with engine.connect() as a:
        a = a.execution_options(isolation_level="AUTOCOMMIT")
        first = _pid(a)
        seen = a.execute(text("SELECT host(inet_client_addr()), inet_client_port()")).one()
        ours = _local_endpoint(a)
        if ours is not None and seen[1] == ours[1] and seen[0] == ours[0]:
            # conclusive without holders: a pooler's server connection has a socket of its own
            return Pooling(DIRECT, f"the server sees this client's own address {ours[0]}:{ours[1]}")
        evidence = _changed_hands(engine, a, first)
    if evidence is not None:
        return Pooling(TRANSACTION, evidence)
    if seen[1] is None and ours is None:
        return Pooling(DIRECT, "a Unix socket, one backend per client connection")
    where = "a Unix socket" if seen[1] is None else f"{seen[0]}:{seen[1]}"
    mine = "a Unix socket" if ours is None else f"{ours[0]}:{ours[1]}"
    return Pooling(SESSION, f"the server sees {where}, not this client's {mine}, and each client connection keeps "
                            "its server backend across transactions")


def pooling_for(settings: "Settings", engine: Engine) -> Pooling:
    """What ``JUDGEFLOW_POOL_MODE`` says, or with ``auto`` what :func:`detect_pooling` finds on ``engine``."""
    mode = settings.pool_mode
    if mode in SETTING_MODES:
        return Pooling(SETTING_MODES[mode], f"JUDGEFLOW_POOL_MODE={mode}")
    return detect_pooling(engine)


def detect_pooling_at(url: str, settings: "Settings | None" = None) -> Pooling:
    """:func:`pooling_for` (:func:`detect_pooling` without ``settings``) on
    connections of their own to ``url``."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from judgeflow.db.engine import CONNECT_ARGS
    from judgeflow.config.settings import normalise_database_url

    engine = create_engine(normalise_database_url(url), poolclass=NullPool,
                           connect_args={**CONNECT_ARGS, "application_name": "judgeflow pool probe"})
    try:
        return detect_pooling(engine) if settings is None else pooling_for(settings, engine)
    finally:
        engine.dispose()
