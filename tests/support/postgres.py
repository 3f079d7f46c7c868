"""A real PostgreSQL server for the test suite, started from the system's
binaries with judgeflow's own EmbeddedPostgres, plus one fresh database per test."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

import psycopg

from judgeflow.db.embedded import EmbeddedPostgres

_counter = itertools.count()


def start_test_server() -> EmbeddedPostgres:
    # under /tmp: the server account (postgres, when tests run as root) must reach it
    base = Path(tempfile.mkdtemp(prefix=f"judgeflow-test-pg-{os.getpid()}-"))
    server = EmbeddedPostgres(base)
    server.start()
    # the cluster asks for its password (scram): libpq, and so every URL and conninfo
    # the suite writes without one, finds it here, in this process and its children
    os.environ["PGPASSFILE"] = str(server.password_file)
    return server


def admin_conninfo(server: EmbeddedPostgres) -> str:
    return f"host=127.0.0.1 port={server.port} user=judgeflow dbname=postgres"


def create_database(server: EmbeddedPostgres, template: str | None = None) -> tuple[str, str]:
    """A new database, empty or a copy of ``template`` (a database nobody is connected to)."""
    name = f"t_{os.getpid()}_{next(_counter)}"
    copy_of = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(admin_conninfo(server), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy_of}')
    return name, f"postgresql+psycopg://judgeflow@127.0.0.1:{server.port}/{name}"


def drop_database(server: EmbeddedPostgres, name: str) -> None:
    with psycopg.connect(admin_conninfo(server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
