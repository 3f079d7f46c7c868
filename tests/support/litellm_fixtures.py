"""Pytest fixtures for LiteLLM spend logs (registered by tests/conftest.py): LiteLLM's table
made by the proxy's own migrations, rows made by LiteLLM's own code
(tests/support/litellm_proxy.py)."""

from __future__ import annotations

import itertools
import os

import psycopg
import pytest

from tests.support.postgres import admin_conninfo

_counter = itertools.count()


@pytest.fixture(scope="session")
def litellm_template(pg_server):
    """A database with every migration of ``litellm-proxy-extras`` applied (copied per test)."""
    from tests.support.litellm_proxy import create_template_database

    def conninfo_for(name):
        return f"host=127.0.0.1 port={pg_server.port} user=judgeflow dbname={name}"

    return create_template_database(admin_conninfo(pg_server), conninfo_for)


@pytest.fixture(scope="session")
def spend_log_rows():
    """Spend-log rows of every scenario of tests/support/litellm_proxy.py, made once per session
    (a subprocess importing litellm's proxy: ~15-30 s on a busy 2-core machine)."""
    from tests.support.judge_server import JudgeServer
    from tests.support.litellm_proxy import app_responder, produce

    with JudgeServer(app_responder) as app:
        return produce(app.url)


@pytest.fixture
def litellm_db(pg_server, litellm_template):
    """A fresh database holding LiteLLM's empty tables: (sqlalchemy URL, psycopg conninfo)."""
    from judgeflow.db.engine import dispose_engines

    name = f"litellm_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(admin_conninfo(pg_server), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{litellm_template}"')
    yield (f"postgresql+psycopg://judgeflow@127.0.0.1:{pg_server.port}/{name}",
           f"host=127.0.0.1 port={pg_server.port} user=judgeflow dbname={name}")
    dispose_engines()
    with psycopg.connect(admin_conninfo(pg_server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def by_scenario(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["_scenario"], []).append(row)
    return out
