"""judgeflow's engines against a real PgBouncer in transaction mode: psycopg
prepares a statement after it has run a few times on a connection, and
through a transaction pool the next transaction lands on a server connection
that has another client's statement of that name, or lacks its own."""

from __future__ import annotations

import threading

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from judgeflow.db.engine import get_engine


def test_repeated_statements_from_several_connections_work_through_a_transaction_pool(
    pgbouncer_transaction, database_url
):
    engine = get_engine(pgbouncer_transaction.url(make_url(database_url).database), pool_size=4)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def client(n: int) -> None:
        try:
            with engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                start.wait()
                for i in range(30):
                    assert conn.execute(sa.text("SELECT :a + 1"), {"a": i}).scalar_one() == i + 1
                    assert conn.execute(sa.text("SELECT :b || 'x'"), {"b": str(n)}).scalar_one() == f"{n}x"
        except BaseException as error:  # reported below, with the others
            errors.append(error)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[:2]
