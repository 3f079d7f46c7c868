"""The embedded PostgreSQL: idempotent start, restart on the same port, a clear
error without binaries."""

import os
import stat
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


def _new_server() -> EmbeddedPostgres:
    return EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="jf-embedded-test-")))


def _without_password(server: EmbeddedPostgres) -> dict:
    return dict(host="127.0.0.1", port=server.port, user="judgeflow", dbname="judgeflow", connect_timeout=10,
                passfile="/nonexistent")


def test_a_connection_without_the_password_is_refused_and_the_password_file_is_private():
    server = _new_server()
    try:
        url = server.start()
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(**_without_password(server))
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(**_without_password(server), password="not-the-password")
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
        assert server.password_file.stat().st_uid == os.geteuid()
        assert server.password() in server.password_file.read_text()
        # libpq's own password-file format: psql and the like find it with PGPASSFILE
        with psycopg.connect(**{**_without_password(server), "passfile": str(server.password_file)}) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("judgeflow",)
        assert server.password() not in server.public_url
        from judgeflow.config.scrub import scrub

        assert server.password() not in scrub(f"connecting with {url}")  # a secret like any other
    finally:
        server.destroy()


def test_an_old_trust_cluster_is_secured_on_its_next_start():
    server = _new_server()
    try:
        server.start()
        with psycopg.connect(server.url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (7)")
        server.stop()
        # as clusters were made before: trust for everyone, no password file
        (server.data_dir / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n")
        server.password_file.unlink()
        server.start()
        assert server.is_secured()
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(**_without_password(server))
        with psycopg.connect(server.url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            assert conn.execute("SELECT x FROM kept").fetchone() == (7,)
        assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
    finally:
        server.destroy()
