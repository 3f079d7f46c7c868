"""The embedded PostgreSQL: idempotent start, restart on the same port, a clear
error without binaries."""

import os
import tempfile
from pathlib import Path

import psycopg
import pytest

from judgeflow.db.embedded import EmbeddedPostgres, find_pg_bin
from judgeflow.errors import ConfigError


def test_start_is_idempotent_and_a_restart_keeps_port_and_data():
    server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="jf-embedded-test-")))
    try:
        url = server.start()
        assert server.start() == url and server.is_running()
        conninfo = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
        server.stop()
        assert not server.is_running()
        assert server.start() == url
        with psycopg.connect(conninfo) as conn:
            assert conn.execute("SELECT count(*) FROM kept").fetchone() == (0,)
        if os.geteuid() == 0:  # the server runs as the unprivileged postgres account
            assert (server.data_dir).stat().st_uid != 0
    finally:
        server.destroy()
    assert not server.base_dir.exists()


def test_missing_binaries_are_a_clear_config_error(monkeypatch):
    monkeypatch.setenv("PG_BIN", "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("glob.glob", lambda pattern: [])
    with pytest.raises(ConfigError, match="postgresql"):
        find_pg_bin()
