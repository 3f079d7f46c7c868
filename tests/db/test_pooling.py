"""What sits between judgeflow and PostgreSQL, told apart against the real
thing: the test server directly, and the suite's PgBouncer in session and in
transaction mode; `judgeflow db check` says which, and what runs do there."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from judgeflow.db.pooling import CONSEQUENCE, DIRECT, SESSION, TRANSACTION, detect_pooling_at


def _url(request, database_url: str, mode: str) -> str:
    if mode == "direct":
        return database_url
    return request.getfixturevalue(f"pgbouncer_{mode}").url(make_url(database_url).database)


@pytest.mark.parametrize("mode, expected", [("direct", DIRECT), ("session", SESSION), ("transaction", TRANSACTION)])
def test_the_connection_is_told_apart_and_db_check_says_what_runs_do_there(
    mode, expected, request, database_url, monkeypatch, tmp_path
):
    from judgeflow.status.check import check_database
    from judgeflow.config.settings import load_settings

    url = _url(request, database_url, mode)
    for _ in range(3):  # the same answer every time, whatever the pool's state
        assert detect_pooling_at(url).mode == expected

    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", url)
    monkeypatch.setenv("JUDGEFLOW_HOME", str(tmp_path))
    lines = check_database(load_settings()).lines()
    [line] = [line for line in lines if "connection:" in line]
    assert line.startswith(f"[ok] connection: {expected} (")
    assert line.endswith(CONSEQUENCE[expected])


def test_a_transaction_pool_that_hands_out_idle_server_connections_in_turn_is_told_apart(
    pgbouncer_round_robin, database_url
):
    """server_round_robin = 1 with idle server connections in the pool: a single other client gets
    another idle one and the probing client its own again, as in a session pool."""
    from tests.support.pgbouncer import warm_pool

    url = pgbouncer_round_robin.url(make_url(database_url).database)
    for idle in (1, 2, 3, 5):
        warm_pool(url, idle)
        assert [detect_pooling_at(url).mode for _ in range(3)] == [TRANSACTION] * 3, f"{idle} idle"


def test_two_schema_upgrades_at_once_through_a_transaction_pool_both_reach_the_head(
    pgbouncer_transaction, database_url
):
    import threading

    from judgeflow.db import migrate
    from judgeflow.db.engine import get_engine

    engine = get_engine(pgbouncer_transaction.url(make_url(database_url).database), pool_size=2)
    reached, errors = [], []

    def upgrade() -> None:
        try:
            reached.append(migrate.upgrade(engine))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=upgrade) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert reached == [migrate.head_revision()] * 2
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_through_a_session_pool_a_killed_clients_session_lock_goes_at_once(pgbouncer_session, database_url, db):
    """What a killed run relies on behind a session pool: PgBouncer resets the server connection of a
    client that went away (server_reset_query, DISCARD ALL), which drops its advisory locks."""
    import subprocess
    import sys
    import time

    import sqlalchemy as sa

    url = pgbouncer_session.url(make_url(database_url).database).replace("postgresql+psycopg://", "postgresql://")
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import psycopg, sys, time\n"
         f"conn = psycopg.connect({url!r}, autocommit=True, prepare_threshold=None)\n"
         "conn.execute('SELECT pg_advisory_lock(4242, 4243)')\n"
         "print('locked', flush=True)\n"
         "time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout.readline().strip() == "locked"
        held = sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                       "AND classid = 4242 AND objid = 4243 AND objsubid = 2")
        with db.connect() as conn:
            assert conn.execute(held).scalar_one() == 1
        child.kill()
        child.wait(timeout=10)
        killed = time.monotonic()
        with db.connect() as conn:
            while conn.execute(held).scalar_one():
                assert time.monotonic() - killed < 5, "the killed client's lock outlived it"
                time.sleep(0.05)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
