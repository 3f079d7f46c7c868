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


def _modes_up_to_root(path: Path) -> dict[Path, int]:
    return {p: p.stat().st_mode for p in [path, *path.parents]}


@pytest.mark.skipif(os.geteuid() != 0, reason="the server account is another user only when judgeflow runs as root")
def test_as_root_no_directory_of_the_user_is_opened_and_the_cluster_lives_where_its_account_owns_the_path(tmp_path):
    """A 0700 directory holding a 0644 .env stays closed to another local user
    (``nobody``) after `judgeflow db start` in it."""
    import subprocess

    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o700)
    (private / ".env").write_text("JUDGEFLOW_JUDGE_API_KEY=sk-kept-at-home-0001\n")
    os.chmod(private / ".env", 0o644)
    before = _modes_up_to_root(private)
    server = EmbeddedPostgres(private / "project" / ".judgeflow" / "pg")
    try:
        url = server.start()
        assert _modes_up_to_root(private) == before  # not one parent's mode changed
        read = subprocess.run(["/usr/sbin/runuser", "-u", "nobody", "--", "cat", str(private / ".env")],
                              capture_output=True, text=True)
        assert read.returncode != 0 and "sk-kept-at-home" not in read.stdout
        # the cluster is the postgres account's, in its own home, not under the user's directory
        import pwd

        account = pwd.getpwnam("postgres")
        assert server.data_dir.stat().st_uid == account.pw_uid
        assert private not in server.data_dir.parents
        assert Path(account.pw_dir) in server.data_dir.parents
        assert stat.S_IMODE(server.server_dir.stat().st_mode) == 0o700
        assert (server.base_dir / "server-dir").read_text() == str(server.server_dir)
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.destroy()
    assert not server.server_dir.exists() and not server.base_dir.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the old layout differs only when judgeflow runs as root")
def test_as_root_a_cluster_made_inside_base_dir_moves_to_the_server_accounts_home_with_its_data():
    server = _new_server()
    try:
        server.start()
        with psycopg.connect(server.url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (7)")
        server.stop()
        # where an older judgeflow kept it
        import shutil

        shutil.move(str(server.data_dir), str(server.base_dir / "data"))
        again = EmbeddedPostgres(server.base_dir)
        again.start()
        assert not (server.base_dir / "data").exists() and again.is_initialised()
        with psycopg.connect(again.url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            assert conn.execute("SELECT x FROM kept").fetchone() == (7,)
    finally:
        server.destroy()


@pytest.mark.skipif(os.geteuid() != 0, reason="runuser is used only when judgeflow runs as root")
def test_runuser_is_found_without_path(monkeypatch, pg_server):
    from judgeflow.db.embedded import runuser_path

    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a root crontab's
    assert runuser_path() in ("/usr/sbin/runuser", "/sbin/runuser")
    assert pg_server.is_running()  # `judgeflow status` asks this, through runuser
