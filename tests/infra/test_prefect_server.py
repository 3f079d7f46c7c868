"""judgeflow's local Prefect server, through the real CLI in subprocesses under
a tmp JUDGEFLOW_HOME: started once by concurrent first commands, reused by
later ones, stopped by `judgeflow stop`, never started with PREFECT_API_URL set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from judgeflow.errors import PrefectServerError
from judgeflow.infra.prefect_server import LocalPrefectServer
from tests.support.traces import insert_traces, scripted_trace
from tests.support.processes import kill_processes_under, processes_under


def _cli_env(home: Path, **extra: str) -> dict[str, str]:
    # no PREFECT_API_URL from the session's test harness: the CLI must find its own server
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUDGEFLOW_", "PREFECT_"))}
    env.update(JUDGEFLOW_HOME=str(home), LITELLM_LOCAL_MODEL_COST_MAP="True",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", **extra)
    return env


def _judgeflow(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "judgeflow.cli", *args], env=_cli_env(home, **extra), cwd=home.parent,
        capture_output=True, text=True, timeout=400,
    )


def _server_roots(base_dir: Path) -> list[int]:
    """Processes under the server's directory whose parent is not one of them
    (the server itself, not its worker children)."""
    pids = set(processes_under(base_dir))
    roots = []
    for pid in pids:
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
        if ppid not in pids:
            roots.append(pid)
    return roots


def test_concurrent_first_commands_start_one_server_later_commands_reuse_it_and_stop_stops_all(
    tmp_path, db, database_url, judge_server
):
    home = tmp_path / "home"
    home.mkdir()
    server = LocalPrefectServer(home)
    judge = dict(JUDGEFLOW_DATABASE_URL=database_url, JUDGEFLOW_JUDGE_MODEL="openai/judge-test",
                 JUDGEFLOW_JUDGE_API_BASE=judge_server.url, JUDGEFLOW_JUDGE_API_KEY="test-key-not-secret")
    try:
        # two first commands at once: one starts the server, the other waits for it (file lock)
        with ThreadPoolExecutor(2) as pool:
            first = list(pool.map(lambda _: _judgeflow(home, "ui"), range(2)))
        for proc in first:
            assert proc.returncode == 0, proc.stderr
        urls = {proc.stdout.strip() for proc in first}
        assert urls == {server.ui_url}
        assert sorted("started" in p.stderr for p in first) == [False, True], [p.stderr for p in first]
        assert _server_roots(server.base_dir) == [server.pid]
        with urllib.request.urlopen(f"{server.api_url}/health", timeout=10) as response:
            assert json.loads(response.read()) is True
        with urllib.request.urlopen(server.ui_url, timeout=10) as response:  # the UI is served too
            assert b"<html" in response.read().lower()
        _assert_the_api_wants_the_auth_string(server, first)
        pid = server.pid

        # a later command that needs Prefect reuses it: same process, no second server
        insert_traces(db, [scripted_trace(i)[0] for i in range(3)])
        scored = _judgeflow(home, "score", "--no-alerts", **judge)
        assert scored.returncode == 0, scored.stderr
        assert "prefect (local, running)" in scored.stderr
        assert "| traces | 3 |" in scored.stdout, scored.stdout
        assert "Traceback" not in scored.stderr, scored.stderr
        assert server.pid == pid and _server_roots(server.base_dir) == [pid]
        # nothing left to score: no flow run, no flow module or litellm imported, alerts still evaluated
        idle = _judgeflow(home, "score", **judge)
        assert idle.returncode == 0, idle.stderr
        assert "nothing to score: no (trace, metric) pair is pending in llm_traces; no flow run was started" \
            in idle.stdout
        assert "alert rules evaluated: " in idle.stdout and "Traceback" not in idle.stderr

        # `judgeflow stop` stops what it started (the embedded database was not used here)
        stopped = _judgeflow(home, "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert "Prefect's local server stopped" in stopped.stdout
        assert processes_under(home) == []
        assert not server.is_healthy()
        again = _judgeflow(home, "stop")
        assert "Prefect's local server was not running" in again.stdout
    finally:
        server.stop()
        kill_processes_under(home)


def _api_status(server: LocalPrefectServer, path: str, body: dict, auth: str | None) -> int:
    import base64
    import urllib.error

    request = urllib.request.Request(f"{server.api_url}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _assert_the_api_wants_the_auth_string(server: LocalPrefectServer, ui_runs) -> None:
    """What another local user could do with the port alone: nothing."""
    import stat

    secrets_query = {"include_secrets": True}
    assert _api_status(server, "/block_documents/filter", secrets_query, None) == 401
    assert _api_status(server, "/block_documents/filter", secrets_query, "judgeflow:guessed") == 401
    assert _api_status(server, "/deployments/filter", {}, None) == 401
    auth = server.auth_file.read_text().strip()
    assert _api_status(server, "/block_documents/filter", secrets_query, auth) == 200
    # made at first start, for this user only, in a directory (with the server's sqlite) for this user only
    assert stat.S_IMODE(server.auth_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(server.base_dir.stat().st_mode) == 0o700
    if os.geteuid() == 0:
        read = subprocess.run(["/usr/sbin/runuser", "-u", "nobody", "--", "cat", str(server.auth_file)],
                              capture_output=True, text=True)
        assert read.returncode != 0 and auth not in read.stdout
    # `judgeflow ui` says how to log in, without printing the string itself
    for proc in ui_runs:
        assert f"the UI asks for an auth string: it is the line in {server.auth_file}" in proc.stderr
        assert auth not in proc.stderr + proc.stdout


def test_stop_also_stops_the_embedded_database(tmp_path):
    from judgeflow.db.embedded import EmbeddedPostgres

    home = tmp_path / "home"
    database = EmbeddedPostgres(home / "pg")
    try:
        assert _judgeflow(home, "db", "start").returncode == 0
        assert database.is_running()
        stopped = _judgeflow(home, "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert "embedded PostgreSQL stopped" in stopped.stdout
        assert not database.is_running() and processes_under(home) == []
    finally:
        database.destroy()


def test_with_prefect_api_url_set_nothing_is_started(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = _judgeflow(home, "ui", PREFECT_API_URL="http://127.0.0.1:9/api", PREFECT_UI_URL="http://127.0.0.1:9")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "http://127.0.0.1:9"
    assert not (home / "prefect").exists() and processes_under(home) == []


def test_a_server_that_does_not_come_up_is_one_clear_error_and_nothing_is_left_running(tmp_path):
    server = LocalPrefectServer(tmp_path / "home")
    with pytest.raises(PrefectServerError) as raised:
        server.start(timeout_s=0.01)  # no server answers within 10 ms
    message = str(raised.value)
    assert "\n" not in message
    assert "did not answer within 0 s" in message and str(server.log_file) in message
    assert processes_under(tmp_path / "home") == [] and server.state() is None


IMPOSTOR = "judgeflow-impostor"


def _impostor_account() -> str:
    """A second local account (made once, without a home or a login shell)."""
    import pwd

    try:
        pwd.getpwnam(IMPOSTOR)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", IMPOSTOR],
                       check=True, capture_output=True)
    return IMPOSTOR


@pytest.fixture
def impostor():
    """Another local user's server on a free port, holding a pid of its own: what that user
    can set up after a crash left server.json naming a port and a pid (pids are reused).
    Yields (its pid, its port, what it received)."""
    import shutil
    import tempfile

    from tests.docker.test_ui_served import _free_port

    if os.geteuid() != 0:
        pytest.skip("making and becoming a second Unix user needs root")
    account = _impostor_account()
    shared = Path(tempfile.mkdtemp(prefix="judgeflow-test-impostor-"))  # /tmp: the other account reaches it
    os.chmod(shared, 0o777)
    script = shared / "impostor_server.py"
    shutil.copy(Path(__file__).parents[1] / "support" / "impostor_server.py", script)
    os.chmod(script, 0o644)
    log, port = shared / "received.jsonl", _free_port()
    proc = subprocess.Popen(["/usr/sbin/runuser", "-u", account, "--", "/usr/bin/python3", str(script), str(port),
                             str(log)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.exists() and log.read_text(), proc.stderr.read().decode() if proc.poll() is not None else "no start"
    pid = json.loads(log.read_text().splitlines()[0])["pid"]

    def received() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()[1:]]

    try:
        yield pid, port, received
    finally:
        subprocess.run(["/usr/sbin/runuser", "-u", account, "--", "kill", str(pid)], capture_output=True)
        proc.wait(timeout=30)
        shutil.rmtree(shared, ignore_errors=True)


def test_another_users_server_at_the_recorded_pid_and_port_is_refused_and_sent_no_auth_string(tmp_path, impostor):
    pid, port, received = impostor
    home = tmp_path / "home"
    server = LocalPrefectServer(home)
    server._private_dir()
    secret = server.auth_string()
    # a crash left server.json; the pid and the port are now the other user's
    server.state_file.write_text(json.dumps({"pid": pid, "port": port, "started_at": time.time()}))

    proc = _judgeflow(home, "ui")

    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"judgeflow: the Prefect server on 127.0.0.1:{port} that {server.state_file} names "
                           "is not judgeflow's own (")
    assert f"its socket belongs to uid {os.stat(f'/proc/{pid}').st_uid} ({IMPOSTOR})" in line
    assert "its auth string was not sent" in line and proc.stdout == ""
    # what every command does before its first Prefect call, then such a call: refused before it
    client = subprocess.run(
        [sys.executable, "-c", "from judgeflow.run.metric_door import entry_settings\n"
         "from judgeflow.infra.prefect_server import use_prefect\n"
         "use_prefect(entry_settings())\n"
         "from prefect.client.orchestration import get_client\n"
         "with get_client(sync_client=True) as c: c.read_flows(limit=1)\n"],
        env=_cli_env(home), cwd=home.parent, capture_output=True, text=True, timeout=300)
    assert client.returncode != 0 and "PrefectServerError" in client.stderr, client.stderr
    asked = received()
    assert asked, "judgeflow never reached the impostor: the test proves nothing"
    password = secret.split(":", 1)[1]
    for request in asked:
        assert not any(name.lower() in ("authorization", "proxy-authorization") for name in request["headers"])
        assert password not in json.dumps(request) and secret not in json.dumps(request)
    # `judgeflow stop` forgets it without signalling another user's process
    stopped = _judgeflow(home, "stop")
    assert "Prefect's local server was not running" in stopped.stdout, stopped.stderr
    assert server.state() is None and Path(f"/proc/{pid}").exists()
