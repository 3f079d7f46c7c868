"""A real Arize Phoenix server for tests, in a venv of its own, on the test PostgreSQL.

Phoenix (``arize-phoenix``) pins a FastAPI that judgeflow's lock refuses, so it lives in
``.venv-phoenix/`` (tests/support/phoenix_requirements.txt), made once by
:func:`ensure_venv` (``./scripts/setup --phoenix``, or the first test that needs it: a few
minutes) and reused while the requirements are unchanged. :class:`PhoenixServer` starts
``phoenix serve`` on 127.0.0.1 (free ports, ``PHOENIX_WORKING_DIR`` under the caller's
directory, ``PHOENIX_SQL_DATABASE_URL`` the given database) and waits for ``/healthz``;
:func:`send_traces` runs tests/support/phoenix_client.py (an OpenInference-instrumented
OpenAI client) in that venv against it.

    python -m tests.support.phoenix --setup     # what ./scripts/setup --phoenix runs
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-phoenix"
REQUIREMENTS = Path(__file__).with_name("phoenix_requirements.txt")
CLIENT = Path(__file__).with_name("phoenix_client.py")


def _digest() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]


def ensure_venv(venv: Path = VENV) -> Path:
    """Phoenix's venv's python, installing it when missing or out of date."""
    python = venv / "bin" / "python"
    stamp = venv / ".judgeflow-phoenix-installed"
    if python.exists() and stamp.exists() and stamp.read_text() == _digest():
        return python
    base = getattr(sys, "_base_executable", None) or sys.executable
    if not python.exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(REQUIREMENTS)],
        check=True,
    )
    stamp.write_text(_digest())
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PhoenixServer:
    def __init__(self, python: Path, database_url: str, workdir: Path):
        self.python = python
        self.database_url = database_url
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None

    @property
    def collector(self) -> str:
        return f"{self.url}/v1/traces"

    def start(self, timeout_s: float = 240) -> "PhoenixServer":
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(
            os.environ, PHOENIX_SQL_DATABASE_URL=self.database_url, PHOENIX_WORKING_DIR=str(self.workdir),
            PHOENIX_HOST="127.0.0.1", PHOENIX_PORT=str(self.port), PHOENIX_GRPC_PORT=str(free_port()),
            PHOENIX_TELEMETRY_ENABLED="false",
        )
        log = open(self.workdir / "phoenix.log", "wb")
        self._proc = subprocess.Popen(
            [str(self.python), "-m", "phoenix.server.main", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"phoenix exited {self._proc.returncode}: "
                                   f"{(self.workdir / 'phoenix.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"phoenix did not answer /healthz within {timeout_s:.0f} s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def __enter__(self) -> "PhoenixServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read() or b"{}")


def send_traces(python: Path, collector: str, api_base: str, only: list[str] | None = None) -> dict:
    """Runs the instrumented client in Phoenix's venv: ``{scenario: {"trace_id"}}``."""
    args = [str(python), str(CLIENT), "--collector", collector, "--api-base", api_base]
    for name in only or []:
        args += ["--only", name]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"phoenix client failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def phoenix_with_traces(pg_server, workdir: Path):
    """A Phoenix server on a fresh database of the test PostgreSQL, holding the traces of
    every scenario of tests/support/phoenix_client.py: yields (server, the database's
    sqlalchemy URL, {scenario: {"trace_id"}})."""
    import sqlalchemy as sa

    from tests.support.judge_server import JudgeServer
    from tests.support.litellm_proxy import app_responder
    from tests.support.postgres import create_database, drop_database

    python = ensure_venv()
    name, url = create_database(pg_server)
    engine = sa.create_engine(url)
    try:
        with PhoenixServer(python, url.replace("postgresql+psycopg://", "postgresql://"), workdir) as server, \
                JudgeServer(app_responder) as app:
            sent = send_traces(python, server.collector, app.url)
            deadline = time.monotonic() + 60  # Phoenix inserts spans in batches, a moment later
            while time.monotonic() < deadline:
                with engine.connect() as conn:
                    stored = conn.execute(sa.text("SELECT count(*) FROM spans WHERE span_kind = 'LLM'")).scalar()
                if stored >= len(sent):
                    break
                time.sleep(0.5)
            yield server, url, sent
    finally:
        engine.dispose()
        drop_database(pg_server, name)


if __name__ == "__main__":
    if sys.argv[1:] == ["--setup"]:
        print(ensure_venv())
    else:
        sys.exit("usage: python -m tests.support.phoenix --setup")
