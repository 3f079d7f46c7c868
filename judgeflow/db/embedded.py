"""A private PostgreSQL cluster run from the system's PostgreSQL binaries.

Used when ``JUDGEFLOW_DATABASE_URL`` is unset (the embedded default, under
``JUDGEFLOW_HOME``, normally ``.judgeflow/``) and by the test suite. No root,
no system service: ``initdb`` and ``postgres`` refuse to run as root, so when
judgeflow itself runs as root the cluster is owned and run by the unprivileged
``postgres`` account through ``runuser`` (found at its absolute path: cron's
PATH may not name /usr/sbin).

judgeflow never changes the permissions of a directory it did not make: as root,
the cluster's data and log live under the server account's own home
(``~postgres/judgeflow/<hash of base_dir>/``), a path that account owns and
reaches, rather than inside ``base_dir``, whose parents may be private (a 0700
home holding a ``.env`` must stay closed to other users). ``base_dir`` keeps
the port, the password file (root's, 0600) and ``server-dir``, naming where the
cluster is. A cluster made inside ``base_dir`` by an older judgeflow is moved
there on its next start.

The cluster listens on 127.0.0.1 only, on a port chosen at first start and
kept in the data directory. Every connection authenticates with scram-sha-256
as the ``judgeflow`` superuser, whose password is generated at first start and
kept in ``base_dir/pgpass`` (mode 0600, libpq's password-file format, so
``PGPASSFILE=<it> psql -h 127.0.0.1 -p <port> -U judgeflow`` works too): any
other local user can reach the port, so the port alone must not let them in.
A password rather than a private Unix socket, because PgBouncer, Prefect's
asyncpg and the URL judgeflow hands to its own processes all speak TCP.

A cluster made before that (trust authentication) is secured on its next start,
before it listens on TCP: started on a private socket only, the password set,
``pg_hba.conf`` rewritten, stopped, then started as usual.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

from judgeflow.infra.dir_lock import locked
from judgeflow.errors import ConfigError, DatabaseError
from judgeflow.config.scrub import register

USER = "judgeflow"
DATABASE = "judgeflow"
_RUN_AS_WHEN_ROOT = "postgres"
RUNUSER_PATHS = ("/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser", "/bin/runuser")
_HBA_MARK = "# judgeflow: scram-sha-256 for every connection"
_HBA = f"""{_HBA_MARK} (the password is in the pgpass file beside the data directory)
local all all scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
host  all all ::1/128 scram-sha-256
"""


def find_pg_bin() -> Path:
    """Directory holding initdb/pg_ctl/postgres: $PG_BIN, PATH, or Debian's layout."""
    candidates: list[Path] = []
    if os.environ.get("PG_BIN"):
        candidates.append(Path(os.environ["PG_BIN"]))
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    candidates += [Path(p) for p in versions]
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    raise ConfigError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found; install Debian's 'postgresql' "
        "package (./scripts/setup --postgres does) or set JUDGEFLOW_DATABASE_URL"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def runuser_path() -> str:
    """util-linux's runuser, by its absolute path: a root crontab's PATH often lacks /usr/sbin."""
    for path in RUNUSER_PATHS:
        if os.access(path, os.X_OK):
            return path
    raise ConfigError("running as root needs util-linux's runuser (/usr/sbin/runuser) to start the embedded "
                      "PostgreSQL as the postgres account; install util-linux or set JUDGEFLOW_DATABASE_URL")


def _server_account_dir(base_dir: Path) -> Path:
    """Where a root judgeflow keeps ``base_dir``'s cluster: under the server account's home."""
    home = Path(pwd.getpwnam(_RUN_AS_WHEN_ROOT).pw_dir) if _has_account(_RUN_AS_WHEN_ROOT) else Path("/var/lib/postgresql")
    return home / "judgeflow" / hashlib.sha256(str(base_dir).encode()).hexdigest()[:16]


def _has_account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _prune_orphans(top: Path) -> None:
    """Remove the clusters whose ``base_dir`` is gone (a deleted JUDGEFLOW_HOME): stopped, and
    nothing points at them any more."""
    for directory in top.iterdir():
        try:
            base = Path((directory / "base-dir").read_text())
        except OSError:
            continue
        if not base.exists() and not (directory / "data" / "postmaster.pid").exists():
            shutil.rmtree(directory, ignore_errors=True)


class EmbeddedPostgres:
    """One cluster in ``base_dir`` (data in ``base_dir/data``); judgeflow works in its database ``database``
    (``JUDGEFLOW_EMBEDDED_DATABASE``: the demo keeps one of its own in the same cluster)."""

    def __init__(self, base_dir: Path, *, port: int | None = None, database: str = DATABASE):
        self.base_dir = Path(base_dir).resolve()
        self.database = database
        self.server_dir = _server_account_dir(self.base_dir) if self._run_as() else self.base_dir
        self.data_dir = self.server_dir / "data"
        self.log_file = self.server_dir / "postgres.log"
        self._port_file = self.base_dir / "port"
        self.password_file = self.base_dir / "pgpass"
        self._requested_port = port
        self._bin: Path | None = None

    @classmethod
    def for_settings(cls, settings) -> "EmbeddedPostgres":
        return cls(Path(settings.home) / "pg", database=settings.embedded_database)

    # -- facts --------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port_file.exists():
            return int(self._port_file.read_text().strip())
        if self._requested_port:
            return self._requested_port
        raise DatabaseError(f"embedded PostgreSQL in {self.base_dir} has not been started")

    @property
    def url(self) -> str:
        """The URL judgeflow connects with, password included (URL-encoded)."""
        return f"postgresql+psycopg://{USER}:{quote(self.password(), safe='')}@127.0.0.1:{self.port}/{self.database}"

    @property
    def public_url(self) -> str:
        """The URL without the password (to print; libpq finds it with PGPASSFILE=password_file)."""
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{self.database}"

    def password(self) -> str:
        """The superuser's password, generated on first use into ``password_file`` (0600)."""
        if self.password_file.exists():
            for line in self.password_file.read_text().splitlines():
                if line.startswith("127.0.0.1:"):
                    return line.rsplit(":", 1)[1]
        value = secrets.token_urlsafe(32)  # no ':' or '\\': nothing to escape in pgpass or a URL
        self.base_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("".join(f"{host}:*:*:{USER}:{value}\n" for host in ("127.0.0.1", "localhost")))
        os.chmod(self.password_file, 0o600)
        return value

    def is_initialised(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def is_running(self) -> bool:
        if not self._port_file.exists() or not (self.data_dir / "postmaster.pid").exists():
            return False
        return self._run(["pg_ctl", "status", "-D", str(self.data_dir)], check=False).returncode == 0

    # -- lifecycle ----------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> str:
        """Initialise if needed, start if not running, create the database.
        Safe to call from several processes at once. Returns the URL."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with locked(self.base_dir):
            if self._run_as():
                self._prepare_server_dir()
            if not self.is_initialised():
                self._initdb()
            if not self.is_running():
                port = self._requested_port or self._previous_port_if_free() or _free_port()
                self._port_file.write_text(str(port))
                if not self.is_secured():
                    self._secure(port, timeout_s)
                self._run(
                    [
                        "pg_ctl", "start", "-w", "-t", str(int(timeout_s)),
                        "-D", str(self.data_dir), "-l", str(self.log_file),
                        "-o", f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''",
                    ],
                    what="start embedded PostgreSQL",
                )
            self._create_database()
        register([self.password()])  # scrubbed from this process's logs and errors, as any secret
        return self.url

    def stop(self, mode: str = "fast") -> None:
        if self.is_initialised() and self.is_running():
            self._run(["pg_ctl", "stop", "-w", "-m", mode, "-D", str(self.data_dir)], check=False)

    def kill(self) -> None:
        """Stop the server abruptly (immediate mode), as a crash would."""
        self.stop(mode="immediate")

    def drop_database(self) -> None:
        """Drop this cluster's ``database`` (its connections ended), leaving the cluster and its other
        databases as they are; nothing to do in a cluster never initialised."""
        import psycopg

        if not self.is_initialised():
            return
        self.start()
        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=self.password(),
                             dbname="postgres", connect_timeout=10, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)
        if self.server_dir != self.base_dir:
            shutil.rmtree(self.server_dir, ignore_errors=True)

    def is_secured(self) -> bool:
        """pg_hba.conf is judgeflow's: a password for every connection."""
        hba = self.data_dir / "pg_hba.conf"
        return hba.exists() and hba.read_text().startswith(_HBA_MARK)

    # -- internals ----------------------------------------------------------
    def _secure(self, port: int, timeout_s: float) -> None:
        """Set the password and require it everywhere, with the server reachable
        only on a socket in a 0700 directory meanwhile (no TCP while trust holds)."""
        import psycopg
        from psycopg import sql

        # mkdtemp: mode 0700, and a short path (a socket's path has a limit of about 100 bytes)
        socket_dir = Path(tempfile.mkdtemp(prefix="judgeflow-pg-"))
        owner = self._run_as()
        if owner:
            entry = pwd.getpwnam(owner)
            os.chown(socket_dir, entry.pw_uid, entry.pw_gid)
        self._run(["pg_ctl", "start", "-w", "-t", str(int(timeout_s)), "-D", str(self.data_dir), "-l",
                   str(self.log_file), "-o", f"-p {port} -c listen_addresses='' -c unix_socket_directories={socket_dir}"],
                  what="start embedded PostgreSQL to set its password")
        try:
            with psycopg.connect(host=str(socket_dir), port=port, user=USER, dbname="postgres",
                                 autocommit=True) as conn:
                conn.execute("SET password_encryption = 'scram-sha-256'")
                conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(USER),
                                                                          sql.Literal(self.password())))
            (self.data_dir / "pg_hba.conf").write_text(_HBA)
        finally:
            self._run(["pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data_dir)], check=False)
            shutil.rmtree(socket_dir, ignore_errors=True)

    def _previous_port_if_free(self) -> int | None:
        if self._port_file.exists():
            port = int(self._port_file.read_text().strip())
            if not _port_open(port):
                return port
        return None

    def _run_as(self) -> str | None:
        return _RUN_AS_WHEN_ROOT if os.geteuid() == 0 else None

    def _server_account(self) -> pwd.struct_passwd:
        owner = self._run_as()
        try:
            return pwd.getpwnam(owner)
        except KeyError:
            raise ConfigError(
                f"running as root needs the unprivileged '{owner}' account to own the embedded "
                "PostgreSQL cluster (it comes with Debian's postgresql package)"
            ) from None

    def _prepare_server_dir(self) -> None:
        """Make the server account's directory for this cluster (0700, its own), note
        where it is in ``base_dir``, and move in a cluster an older judgeflow made
        inside ``base_dir``."""
        entry = self._server_account()
        top = self.server_dir.parent
        for directory in (top, self.server_dir):
            if not directory.exists():
                directory.mkdir(mode=0o700)
                os.chown(directory, entry.pw_uid, entry.pw_gid)
        (self.server_dir / "base-dir").write_text(str(self.base_dir))
        (self.base_dir / "server-dir").write_text(str(self.server_dir))
        old = self.base_dir / "data"
        if (old / "PG_VERSION").exists() and not self.is_initialised():
            self._run(["pg_ctl", "stop", "-w", "-m", "fast", "-D", str(old)], check=False)
            shutil.move(str(old), str(self.data_dir))
            for root, dirs, files in os.walk(self.data_dir):
                for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                    os.lchown(name, entry.pw_uid, entry.pw_gid)
        _prune_orphans(top)

    def _initdb(self) -> None:
        if self._run_as():
            entry = self._server_account()
            self.data_dir.mkdir(exist_ok=True)
            os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        # trust only until the first start secures it, which happens before any TCP listen (_secure)
        self._run(
            ["initdb", "-D", str(self.data_dir), "-U", USER, "--auth=trust", "-E", "UTF8",
             "--locale=C.UTF-8", "--no-sync"],
            what="initialise embedded PostgreSQL",
        )
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            # a development cluster: durability traded for speed, a few knobs for tests
            conf.write("\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
            conf.write("max_connections = 200\nshared_buffers = 128MB\n")

    def _create_database(self) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=self.password(),
                             dbname="postgres", connect_timeout=10, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')

    def _run(self, argv: list[str], *, what: str = "", check: bool = True) -> subprocess.CompletedProcess:
        if self._bin is None:
            self._bin = find_pg_bin()
        argv = [str(self._bin / argv[0]), *argv[1:]]
        owner = self._run_as()
        if owner:
            argv = [runuser_path(), "-u", owner, "--", *argv]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd="/")
        if check and proc.returncode != 0:
            log_tail = ""
            if self.log_file.exists():
                log_tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-10:])
            raise DatabaseError(
                f"could not {what or argv[0]} (exit {proc.returncode}): "
                f"{proc.stderr.strip() or proc.stdout.strip()}\n{log_tail}".strip()
            )
        return proc
