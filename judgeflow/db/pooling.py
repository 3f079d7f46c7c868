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
vanish under it, or outlive it. ``SHOW pool_mode`` is PgBouncer's admin
console only, so the mode is found by what it does:

1. client connection A runs a transaction and notes its server's backend pid;
2. client connection B opens a transaction and notes its backend pid, and
   keeps it open (its server connection is taken meanwhile);
3. A runs a second transaction and notes its backend pid.

Behind a transaction pool, A's server connection went back to the pool after
step 1: B got it (a pool hands out the connection released last) or A's next
transaction runs on another one. Either shows as a pid that changed hands.
Directly, or through a session pool, A keeps its backend and B has its own.
A direct connection and a session pool are told apart by the client
address: the server sees the pooler's socket, not ours.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

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

# how long B may wait for a server connection: a full session pool keeps it waiting (A holds one for as
# long as it is connected), a transaction pool hands it A's at once
_WAIT_FOR_SERVER_S = 5.0


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


def detect_pooling(engine: Engine) -> Pooling:
    """Which of the three sits behind ``engine``'s URL (see the module doc).
    Takes two connections of ``engine`` for a few milliseconds; best a
    NullPool engine of its own (a full session pool may keep the second
    waiting, and it is then left to the pooler's wait timeout)."""
    taken = threading.Event()
    done = threading.Event()
    held: dict[str, int] = {}

    def hold_a_transaction() -> None:
        try:
            with engine.connect() as b:
                with b.begin():
                    held["pid"] = _pid(b)
                    taken.set()
                    done.wait(_WAIT_FOR_SERVER_S)
        except Exception:
            pass
        finally:
            taken.set()

    with engine.connect() as a:
        a = a.execution_options(isolation_level="AUTOCOMMIT")
        first = _pid(a)
        seen = a.execute(text("SELECT host(inet_client_addr()), inet_client_port()")).one()
        ours = _local_endpoint(a)
        holder = threading.Thread(target=hold_a_transaction, name="judgeflow-pool-probe", daemon=True)
        holder.start()
        # no server connection for B in time: A keeps its own, so the pool is not per transaction
        taken.wait(_WAIT_FOR_SERVER_S)
        try:
            second = _pid(a)
        finally:
            done.set()
    other = held.get("pid")
    holder.join(_WAIT_FOR_SERVER_S)
    if other == first or second != first:
        return Pooling(TRANSACTION, f"a client connection's server backend changed hands between two of its "
                                    f"transactions (pid {first}, then {second}; another client got pid {other})")
    if seen[1] is None and ours is None:
        return Pooling(DIRECT, "a Unix socket, one backend per client connection")
    if ours is not None and seen[1] == ours[1] and seen[0] == ours[0]:
        return Pooling(DIRECT, f"the server sees this client's own address {ours[0]}:{ours[1]}")
    where = "a Unix socket" if seen[1] is None else f"{seen[0]}:{seen[1]}"
    mine = "a Unix socket" if ours is None else f"{ours[0]}:{ours[1]}"
    return Pooling(SESSION, f"the server sees {where}, not this client's {mine}, and each client connection keeps "
                            "its server backend across transactions")


def detect_pooling_at(url: str) -> Pooling:
    """:func:`detect_pooling` on two connections of their own to ``url``."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from judgeflow.db.engine import CONNECT_ARGS
    from judgeflow.settings import normalise_database_url

    engine = create_engine(normalise_database_url(url), poolclass=NullPool,
                           connect_args={**CONNECT_ARGS, "application_name": "judgeflow pool probe"})
    try:
        return detect_pooling(engine)
    finally:
        engine.dispose()
