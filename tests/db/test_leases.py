"""The lease keeper (judgeflow/db/leases.py) against a real PostgreSQL and
PgBouncer: a run held still past its lease re-checks its pairs before judging
them, JUDGEFLOW_POOL_MODE is obeyed, and a run lock found on another backend
turns the run to leases without unlocking anything there."""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from judgeflow.db import migrate
from judgeflow.db.leases import LeaseKeeper, check_owned
from judgeflow.db.pending import RUN_LOCK_NAMESPACE
from judgeflow.db.pooling import TRANSACTION
from judgeflow.config.settings import load_settings
from judgeflow.run.gate import TAKEN_OVER
from judgeflow.run.policy import RunPolicy
from judgeflow.tasks.claims import claim_traces
from tests.support.pgbouncer import warm_pool
from tests.support.traces import insert_traces, scripted_trace


@pytest.fixture
def traces(judgeflow_env, db):
    insert_traces(db, [scripted_trace(i)[0] for i in range(3)])
    migrate.upgrade(db)


def _run_locks(db) -> int:
    with db.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                                    "AND classid = CAST(CAST(:ns AS int) AS oid)"),
                            {"ns": RUN_LOCK_NAMESPACE}).scalar_one()


def _eventually(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _lease_runs(db, trace_id: str) -> bool:
    with db.connect() as conn:
        return conn.execute(sa.text("SELECT lease_expires_at > now() FROM judgeflow.claims WHERE trace_id = :t"),
                            {"t": trace_id}).scalar_one()


@contextmanager
def _run_a(monkeypatch, owner: str):
    """Run ``owner`` on a 1.5 s lease with its keeper, holding every traces' pair:
    (settings, keeper, its batch, when it claimed it)."""
    monkeypatch.setenv("JUDGEFLOW_LEASE_TIMEOUT_S", "1.5")
    settings = load_settings()
    with LeaseKeeper(settings, owner) as keeper:
        batch = claim_traces.fn(settings, owner, ["toxicity"], 10, owner_key=keeper.owner_key)
        yield settings, keeper, batch, time.time()


def _lapse_while_run_b_takes_tr0000(settings, db) -> None:
    """With run A's keeper held still (as by SIGSTOP: its lock taken by the
    caller), its leases run out and run B takes tr-0000 over."""
    _eventually(lambda: not _lease_runs(db, "tr-0000"), "the lease to run out")
    taken = claim_traces.fn(settings, "run-b:1", ["toxicity"], 1, owner_key=None)
    assert [w.trace_id for w in taken.items] == ["tr-0000"]


def test_a_keeper_held_still_past_its_lease_has_each_pair_checked_and_renews_what_is_still_its_own(
    traces, db, monkeypatch
):
    owner = "run-a:1"
    with _run_a(monkeypatch, owner) as (settings, keeper, batch, claimed_at):
        assert len(batch.items) == 3
        assert not keeper.at_risk(claimed_at)  # renewed in time: no check, no round trip
        with keeper._conn_lock:
            _lapse_while_run_b_takes_tr0000(settings, db)
            assert keeper.at_risk(claimed_at)  # not renewed within its lifetime
        # on resume, before anything is judged: the pair another run took is not the run's, the others are
        mine = {w.trace_id: check_owned(settings, owner, w, keeper)[0] for w in batch.items}
        assert mine == {"tr-0000": False, "tr-0001": True, "tr-0002": True}
        assert _lease_runs(db, "tr-0001") and _lease_runs(db, "tr-0002")  # renewed again
        # batches claimed before the lapse keep being checked; one claimed after it is not
        assert keeper.at_risk(claimed_at)
        assert not keeper.at_risk(time.time() + 0.01)


def test_a_pair_gate_confirmed_after_a_lapse_is_fresh_again_while_the_lease_is_renewed(traces, db, monkeypatch):
    """The gate of a pair (judgeflow/run/gate.py), made from the run's with its
    keeper: once started, after the run lapsed, a pair the database shows is
    still the run's counts as claimed anew, so its next calls (and a call
    handed to a judge worker) go out unchecked again; a pair another run took
    stays refused, and says so."""
    owner = "run-a:1"
    with _run_a(monkeypatch, owner) as (settings, keeper, batch, claimed_at):
        run = RunPolicy(settings, owner, keeper=keeper)
        kept, taken = (run.pair(w, claimed_at) for w in batch.items[1:2] + batch.items[:1])
        assert kept.fresh_until() == taken.fresh_until() == -math.inf  # not started: the start is asked first
        assert asyncio.run(kept.confirm()) and asyncio.run(taken.confirm())  # fresh: no database
        assert kept.fresh_until() > time.monotonic()
        with keeper._conn_lock:
            _lapse_while_run_b_takes_tr0000(settings, db)
        assert kept.fresh_until() <= time.monotonic() and taken.fresh_until() <= time.monotonic()
        assert asyncio.run(kept.confirm()) and not asyncio.run(taken.confirm())
        assert taken.refused is TAKEN_OVER and kept.refused is None
        assert kept.fresh_until() > time.monotonic()  # the lease renewed by the check: no round trip until stale
        assert taken.fresh_until() <= time.monotonic()


def test_the_pool_mode_setting_is_obeyed_without_a_probe(traces, db, monkeypatch):
    from judgeflow.status.check import check_database

    monkeypatch.setenv("JUDGEFLOW_POOL_MODE", "transaction")
    settings = load_settings()
    with LeaseKeeper(settings, "run-a:1") as keeper:
        assert keeper.pooling.mode == TRANSACTION and "JUDGEFLOW_POOL_MODE=transaction" in keeper.pooling.evidence
        assert keeper.owner_key is None and _run_locks(db) == 0  # claims held by lease alone
    [line] = [line for line in check_database(settings).lines() if "connection:" in line]
    assert line.startswith(f"[ok] connection: {TRANSACTION} (JUDGEFLOW_POOL_MODE=transaction)")


@pytest.fixture
def steady_round_robin(pg_server):
    """A transaction pool that hands idle server connections out in turn and closes
    none of them on its own (no lifetime or idle timeout within a test): which backend
    serves each transaction follows from the order of transactions, not from a clock;
    the test closes them when it wants (RECONNECT on the admin console)."""
    from tests.support.pgbouncer import PgBouncer

    bouncer = PgBouncer(pg_server, pool_mode="transaction", server_round_robin=True,
                        server_lifetime_s=3600, server_idle_timeout_s=3600).start()
    yield bouncer
    bouncer.stop()


def _reconnect_servers(bouncer) -> None:
    """PgBouncer's RECONNECT: every server connection is closed once released."""
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=bouncer.port, user="judgeflow", dbname="pgbouncer",
                         autocommit=True) as admin:
        admin.execute("RECONNECT")


def test_a_run_lock_found_on_another_backend_turns_the_run_to_leases_and_unlocks_nothing_there(
    traces, db, database_url, monkeypatch, steady_round_robin
):
    """Told (wrongly) that the pool keeps sessions, a run behind a transaction
    pool takes its lock on one server connection and finds it on another
    backend at its next check: it holds its claims by lease from then on, and
    its lock goes when the pooler closes that server connection."""
    url = steady_round_robin.url(make_url(database_url).database)
    warm_pool(url, 3)  # three idle server connections, handed out in turn: the next check is on another
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", url)
    monkeypatch.setenv("JUDGEFLOW_POOL_MODE", "session")
    monkeypatch.setenv("JUDGEFLOW_LEASE_TIMEOUT_S", "30")
    settings = load_settings()
    with LeaseKeeper(settings, "run-a:1") as keeper:
        assert keeper.owner_key is not None
        claim_traces.fn(settings, "run-a:1", ["toxicity"], 10, owner_key=keeper.owner_key)
        _eventually(lambda: keeper.pooling.mode == TRANSACTION, "the keeper to see its lock on another backend",
                    timeout=120)
        assert "was not on this connection's backend" in keeper.pooling.evidence
        assert keeper.owner_key is None
        def held() -> int:
            with db.connect() as conn:
                return conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims WHERE owner_key IS NULL "
                                            "AND lease_expires_at > now()")).scalar_one()

        # the keeper turns its claims to leases on its own thread once it has seen the lock elsewhere
        # (the mode is set first): a loaded machine read 0 here between the two
        _eventually(lambda: held() == 3, "the claims held by lease alone", timeout=60)
        assert held() == 3  # by lease alone
        # a second run cannot take them
        assert claim_traces.fn(settings, "run-b:1", ["toxicity"], 10, owner_key=None).items == []
    # judgeflow unlocked nothing: the lock stays on the pooled server connection until the pooler closes it
    assert _run_locks(db) == 1
    _reconnect_servers(steady_round_robin)
    _eventually(lambda: _run_locks(db) == 0, "the pooled server connection holding the lock to close",
                timeout=120)


def test_behind_a_round_robin_transaction_pool_a_run_takes_no_lock_and_leaves_none(
    traces, db, database_url, monkeypatch, pgbouncer_round_robin
):
    url = pgbouncer_round_robin.url(make_url(database_url).database)
    warm_pool(url, 3)
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", url)
    settings = load_settings()
    seen_locks: list[int] = []
    with LeaseKeeper(settings, "run-a:1") as keeper:
        assert keeper.pooling.mode == TRANSACTION, keeper.pooling.evidence
        assert keeper.owner_key is None
        claim_traces.fn(settings, "run-a:1", ["toxicity"], 10, owner_key=keeper.owner_key)
        seen_locks.append(_run_locks(db))
    assert seen_locks == [0] and _run_locks(db) == 0
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0
