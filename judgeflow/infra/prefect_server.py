"""A Prefect API server (with its UI) that lives like the embedded database.

When ``PREFECT_API_URL`` is not set, the first judgeflow command that needs
Prefect starts ``prefect server start`` as a detached process under
``JUDGEFLOW_HOME/prefect`` (its own ``PREFECT_HOME`` and sqlite database,
127.0.0.1, a free port kept in ``server.json``); later commands find it by
that file and a health check and reuse it. ``judgeflow stop`` stops it.

Why not Prefect's own temporary server: it is started and torn down by every
command (seconds of CPU each, timing out on a busy machine), it loses what it
has not persisted when the command exits, and the UI is gone with it.

With ``PREFECT_API_URL`` set (environment or the active Prefect profile)
nothing is started: the configured server is used.

The server listens on 127.0.0.1, which every local user can reach, and its API
hands out Secret blocks and starts runs: it requires Prefect's basic
authentication (``PREFECT_SERVER_API_AUTH_STRING``). The auth string is made at
first start and kept in ``<home>/prefect/auth`` (0600, in a 0700 directory that
also holds the server's sqlite database); every judgeflow command that uses the
server sets ``PREFECT_API_AUTH_STRING`` from it, and the UI asks for it once.
A server found running without authentication (started by an older judgeflow)
is replaced.

The auth string is sent only to a server proven judgeflow's own
(:meth:`LocalPrefectServer.why_not_ours`): the pid ``server.json`` names is this
user's process working in ``<home>/prefect``, and every socket that would take a
connection to its port is this user's and held by that process's session
(``judgeflow/infra/local_listener.py``). After a crash ``server.json`` still names a
pid and a port that another local user may since hold; such a server is refused
with one line and is sent nothing but the unauthenticated health checks.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from judgeflow.config.scrub import register
from judgeflow.infra.dir_lock import locked
from judgeflow.errors import PrefectServerError
from judgeflow.infra.local_listener import why_not_served_by
from judgeflow.infra.local_process import pid_alive as _pid_alive, runs_in as _is_our_server, terminate

HOST = "127.0.0.1"
AUTH_USER = "judgeflow"
# On a busy 2-core machine the server's first start (imports, sqlite
# migrations) has taken over two minutes (the suite beside other jobs); a start that gives up early is a bug.
START_TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((HOST, port)) == 0


class LocalPrefectServer:
    """The server of one ``JUDGEFLOW_HOME`` (state in ``<home>/prefect``)."""

    def __init__(self, home: Path):
        self.base_dir = (Path(home) / "prefect").resolve()
        self.state_file = self.base_dir / "server.json"
        self.log_file = self.base_dir / "server.log"
        self.database = self.base_dir / "prefect.db"
        self.auth_file = self.base_dir / "auth"

    @classmethod
    def for_settings(cls, settings) -> "LocalPrefectServer":
        return cls(Path(settings.home))

    # -- facts --------------------------------------------------------------
    def state(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    @property
    def port(self) -> int | None:
        state = self.state()
        return int(state["port"]) if state else None

    @property
    def pid(self) -> int | None:
        state = self.state()
        return int(state["pid"]) if state else None

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.ui_url}/api"

    def is_healthy(self) -> bool:
        state = self.state()
        if not state or not _pid_alive(int(state["pid"])):
            return False
        return _healthy(f"http://{HOST}:{state['port']}/api")

    def auth_string(self) -> str:
        """The string the server requires (``user:password``), made on first use (0600)."""
        try:
            text = self.auth_file.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return text
        self._private_dir()
        value = f"{AUTH_USER}:{secrets.token_urlsafe(24)}"
        fd = os.open(self.auth_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(value + "\n")
        os.chmod(self.auth_file, 0o600)
        return value

    def _private_dir(self) -> None:
        """``base_dir`` is judgeflow's own (the server's sqlite database holds Secret
        blocks): 0700, also when an older judgeflow made it with the umask's mode."""
        self.base_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.base_dir.stat().st_mode & 0o077 and self.base_dir.stat().st_uid == os.geteuid():
            os.chmod(self.base_dir, 0o700)

    def why_not_ours(self) -> str | None:
        """None when the server ``server.json`` names is proven the one judgeflow started
        here (the module doc); else why not, in words."""
        state = self.state()
        if not state:
            return "no server is recorded"
        pid, port = int(state["pid"]), int(state["port"])
        why = why_not_served_by(pid, HOST, port)  # first: the socket's owner is the telling fact
        if why is None and not _is_our_server(pid, self.base_dir):
            why = f"pid {pid} is not your process working in {self.base_dir}"
        return why

    def prove_ours(self) -> None:
        """PrefectServerError, one line, unless :meth:`why_not_ours` proves the server ours."""
        why = self.why_not_ours()
        if why:
            raise PrefectServerError(
                f"the Prefect server on {HOST}:{self.port} that {self.state_file} names is not judgeflow's own "
                f"({why}); its auth string was not sent. `judgeflow stop` forgets it and the next command "
                "starts judgeflow's own")

    # -- lifecycle ----------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> tuple[str, bool]:
        """Start the server unless it is running; returns (API URL, started now).
        Safe to call from several processes at once: one starts, the others wait
        for it and reuse it."""
        self._private_dir()
        with locked(self.base_dir):
            self.auth_string()
            state = self.state()
            if self.is_healthy():
                if _requires_auth(self.api_url):
                    return self.api_url, False
                if _is_our_server(state["pid"], self.base_dir):  # an older judgeflow's, open to every local user
                    self._terminate(state["pid"])
            state = self.state()
            if state and _pid_alive(state["pid"]) and _is_our_server(state["pid"], self.base_dir):
                # started earlier but not answering (still starting, or hung): give it
                # the same grace as a fresh start, then replace it
                if self._wait_healthy(state["pid"], state["port"], timeout_s):
                    return self.api_url, False
                self._terminate(state["pid"])
            port = self._previous_port_if_free() or _free_port()
            pid = self._spawn(port)
            self.state_file.write_text(json.dumps({"pid": pid, "port": port, "started_at": time.time()}))
            if not self._wait_healthy(pid, port, timeout_s):
                alive = _pid_alive(pid)
                self._terminate(pid)
                self.state_file.unlink(missing_ok=True)
                why = f"did not answer within {timeout_s:.0f} s" if alive else "exited"
                raise PrefectServerError(
                    f"Prefect's local server on {HOST}:{port} {why}; its log is {self.log_file} "
                    "(or set PREFECT_API_URL to use another Prefect server)"
                )
            return self.api_url, True

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the server if it runs; returns whether one was stopped."""
        if not self.base_dir.exists():
            return False
        with locked(self.base_dir):
            state = self.state()
            stopped = False
            if state and _pid_alive(state["pid"]) and _is_our_server(state["pid"], self.base_dir):
                self._terminate(state["pid"], timeout_s)
                stopped = True
            self.state_file.unlink(missing_ok=True)
            return stopped

    # -- internals ----------------------------------------------------------
    def _previous_port_if_free(self) -> int | None:
        state = self.state()
        if state and not _port_open(int(state["port"])):
            return int(state["port"])
        return None

    def _spawn(self, port: int) -> int:
        env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_PROFILE")}
        env.update(
            PREFECT_HOME=str(self.base_dir),
            PREFECT_SERVER_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{self.database}",
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PREFECT_SERVER_API_HOST=HOST,
            PREFECT_SERVER_API_PORT=str(port),
            PREFECT_SERVER_API_AUTH_STRING=self.auth_string(),
            PREFECT_API_AUTH_STRING=self.auth_string(),
            # the UI talks to this API, whatever the shell had configured
            PREFECT_UI_API_URL=f"http://{HOST}:{port}/api",
        )
        # an alert's Prefect event counts as delivered once the API has stored it
        # (judgeflow/alerts/notify.py): store received events every second, not at Prefect's default
        env.setdefault("PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL", "1")
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port", str(port),
                 "--analytics-off"],
                env=env, cwd=self.base_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                # its own session: it outlives this command and ignores the terminal's Ctrl-C
                start_new_session=True,
            )
        return proc.pid

    def _wait_healthy(self, pid: int, port: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return False
            if _healthy(f"http://{HOST}:{port}/api"):
                return True
            time.sleep(0.5)
        return False

    def _terminate(self, pid: int, timeout_s: float = 30.0) -> None:
        # the server runs in its own process group (start_new_session): its
        # workers go with it
        terminate(pid, timeout_s, kill_timeout_s=10.0, group=True)


def _requires_auth(api_url: str) -> bool:
    """Whether the server refuses a request without credentials (its health check never does)."""
    try:
        with urllib.request.urlopen(f"{api_url}/admin/version", timeout=5):
            return False
    except urllib.error.HTTPError as error:
        return error.code == 401
    except (OSError, ValueError):
        return True  # not answering: not a server to replace for this


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=5) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError, ValueError):
        return False


def use_prefect(settings) -> tuple[str, LocalPrefectServer | None, bool]:
    """Point this process's Prefect client at the configured server, or at the
    local one (started if needed). Returns (API URL, the local server or None,
    whether it was started now)."""
    configured = _configured_without_import()
    if configured:
        return configured, None, False
    server = LocalPrefectServer.for_settings(settings)
    url, started = server.start()
    server.prove_ours()  # before the auth string goes anywhere
    os.environ["PREFECT_API_URL"] = url
    auth = server.auth_string()
    os.environ["PREFECT_API_AUTH_STRING"] = auth
    # scrubbed from logs like any secret, also as the Authorization header carries it
    register([auth, auth.split(":", 1)[1], base64.b64encode(auth.encode()).decode()])
    if "prefect.context" in sys.modules:
        # prefect read its settings at import: have it read them again
        from prefect.context import refresh_global_settings_context

        refresh_global_settings_context()
    return url, server, started


def _configured_without_import() -> str | None:
    """PREFECT_API_URL from the environment, or from the active profile in
    PREFECT_HOME's profiles.toml, read without importing prefect (commands that need no
    Prefect call stay quick)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    if "prefect.context" in sys.modules:
        # prefect is imported already (and may be inside temporary_settings): ask it
        from prefect.settings import get_current_settings

        return get_current_settings().api.url or None
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        import tomllib

        profiles = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    url = ((profiles.get("profiles") or {}).get(active) or {}).get("PREFECT_API_URL")
    return url or None


def ui_url_without_import(settings) -> str | None:
    """The Prefect UI's URL for links, without starting or importing Prefect:
    ``PREFECT_UI_URL``, else the configured API's URL without ``/api`` (what
    Prefect itself derives for a self-hosted server), else judgeflow's local
    server's (None when it never started)."""
    if os.environ.get("PREFECT_UI_URL"):
        return os.environ["PREFECT_UI_URL"].rstrip("/")
    configured = _configured_without_import()
    if configured:
        url = configured.rstrip("/")
        return url[: -len("/api")] if url.endswith("/api") else None
    local = LocalPrefectServer.for_settings(settings)
    return local.ui_url if local.port is not None else None


def configured_ui_url() -> str | None:
    """The UI of the Prefect server PREFECT_API_URL points at, when Prefect knows it."""
    from prefect.settings import get_current_settings

    url = get_current_settings().ui_url
    return str(url).rstrip("/") if url else None
