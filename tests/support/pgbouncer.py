"""A real PgBouncer (Debian's ``pgbouncer`` package) in front of the test
PostgreSQL, in transaction or session pooling mode, with short server
lifetimes so that server connections are closed under a live run the way a
production pooler closes them.

Like PostgreSQL, PgBouncer is run as the unprivileged ``postgres`` account
when the suite runs as root. A missing binary fails the test that needs it
with the way to install it (``./scripts/setup --postgres`` does): nothing is
skipped silently.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from judgeflow.db.embedded import EmbeddedPostgres

_RUN_AS_WHEN_ROOT = "postgres"


def find_pgbouncer() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )
    if found is None:
        raise RuntimeError(
            "pgbouncer is not installed: the PgBouncer tests need Debian's 'pgbouncer' package "
            "(./scripts/setup --postgres installs it, or apt-get install pgbouncer)"
        )
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgBouncer:
    """One PgBouncer process forwarding every database name to ``server``."""

    def __init__(self, server: EmbeddedPostgres, *, pool_mode: str, server_lifetime_s: int = 3,
                 server_idle_timeout_s: int = 2, pool_size: int = 40, server_round_robin: bool = False):
        self.server = server
        self.pool_mode = pool_mode
        self.server_lifetime_s = server_lifetime_s
        self.server_idle_timeout_s = server_idle_timeout_s
        self.pool_size = pool_size
        # 1: idle server connections are handed out in turn instead of the one released last
        self.server_round_robin = server_round_robin
        self.port = _free_port()
        self.base = Path(tempfile.mkdtemp(prefix=f"judgeflow-test-pgbouncer-{pool_mode}-"))
        self._proc: subprocess.Popen | None = None

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://judgeflow@127.0.0.1:{self.port}/{database}"

    def start(self, timeout_s: float = 30.0) -> "PgBouncer":
        binary = find_pgbouncer()
        # clients are trusted; the password is what PgBouncer logs in to the server with (scram)
        (self.base / "userlist.txt").write_text(f'"judgeflow" "{self.server.password()}"\n')
        (self.base / "pgbouncer.ini").write_text(
            f"""[databases]
* = host=127.0.0.1 port={self.server.port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.base}/userlist.txt
admin_users = judgeflow
pool_mode = {self.pool_mode}
default_pool_size = {self.pool_size}
max_client_conn = 1000
server_lifetime = {self.server_lifetime_s}
server_idle_timeout = {self.server_idle_timeout_s}
server_round_robin = {int(self.server_round_robin)}
server_connect_timeout = 5
logfile = {self.base}/pgbouncer.log
pidfile = {self.base}/pgbouncer.pid
"""
        )
        kwargs = {}
        if os.geteuid() == 0:
            account = pwd.getpwnam(_RUN_AS_WHEN_ROOT)
            for parent in [self.base, *self.base.parents]:  # the account must reach its files
                if parent == Path("/"):
                    break
                os.chmod(parent, parent.stat().st_mode | 0o001)
            for path in [self.base, *self.base.iterdir()]:
                os.chown(path, account.pw_uid, account.pw_gid)
            kwargs = dict(user=account.pw_uid, group=account.pw_gid, extra_groups=[])
        self._proc = subprocess.Popen(
            [binary, str(self.base / "pgbouncer.ini")], cwd=self.base,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self._proc.returncode}: {self.log_tail()}")
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not listen on {self.port} within {timeout_s} s: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 20) -> str:
        log = self.base / "pgbouncer.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)


def warm_pool(url: str, servers: int) -> None:
    """Leave ``servers`` idle server connections in the pool of the PgBouncer at ``url``."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, connect_args={"prepare_threshold": None})
    try:
        conns = [engine.connect() for _ in range(servers)]
        for conn in conns:
            conn.begin()
            conn.execute(sa.text("SELECT 1"))  # each holds a server connection of its own meanwhile
        for conn in conns:
            conn.commit()
            conn.close()
    finally:
        engine.dispose()
