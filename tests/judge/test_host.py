"""The judge host (judgeflow/judge/host.py): litellm imported once, judge workers
forked for each run's pool, over real HTTP to the local judge server."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from judgeflow.judge import host
from judgeflow.judge.process_pool import JudgeProcessPool
from tests.judge.test_litellm_judge import opinions_request
from tests.judge.test_process_pool import _alive, _parent_pid, _wait_gone, pool_settings
from tests.support.judge_server import JudgeServer


@pytest.fixture
def server(judge_server):  # the suite's (tests/conftest.py), under the name the pool tests use
    return judge_server


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    yield home
    host.stop(home)


def hosted(server: JudgeServer, home: Path, **overrides) -> JudgeProcessPool:
    return JudgeProcessPool(pool_settings(server, home=home, judge_host=True, **overrides))


def _authorizations(server: JudgeServer) -> set[str]:
    return {r.headers.get("Authorization") or r.headers.get("authorization") for r in server.requests}


def test_a_second_run_reuses_the_host_and_its_workers_get_the_runs_environment(server, home, monkeypatch):
    # no key in the settings: litellm reads OPENAI_API_KEY from the environment of
    # the process making the call, which must be the run's, not the host's
    monkeypatch.setenv("OPENAI_API_KEY", "run-one-key")
    # as in a `judgeflow score` process, which never imports the litellm adapter
    monkeypatch.delenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", raising=False)
    with hosted(server, home, judge_api_key=None) as pool:
        assert pool.complete(opinions_request()).content
        assert pool.wait_ready()
        first_host = host.state(home)["pid"]
        workers = pool.worker_pids()
        assert all(_parent_pid(pid) == first_host for pid in workers), "not forked by the host"
        assert Path(os.readlink(f"/proc/{workers[0]}/cwd")) == Path.cwd()  # the run's working directory
    assert _authorizations(server) == {"Bearer run-one-key"}
    # the adapter's environment defaults hold in a forked worker too: litellm's own HTTP
    # handler (read on every call), not the OpenAI SDK's client, though the run never set it
    agents = {value.split("/")[0] for r in server.requests
              for key, value in r.headers.items() if key.lower() == "user-agent"}
    assert agents == {"litellm"}, agents
    for pid in workers:
        assert _wait_gone(pid), "a worker outlived its pool"
    assert _alive(first_host), "the host must outlive the run"
    # the key was not copied into the host's own environment
    assert b"run-one-key" not in Path(f"/proc/{first_host}/environ").read_bytes()

    server.reset()
    monkeypatch.setenv("OPENAI_API_KEY", "run-two-key")
    started = time.monotonic()
    with hosted(server, home, judge_api_key=None) as pool:
        pool.start()
        assert pool.wait_ready()
        ready_s = time.monotonic() - started
        assert pool.complete(opinions_request()).content
        assert host.state(home)["pid"] == first_host  # reused, not a second host
        assert set(pool.worker_pids()).isdisjoint(workers)  # fresh workers for each run
    assert _authorizations(server) == {"Bearer run-two-key"}
    # a warm host forks in milliseconds where a fresh start imports litellm (seconds)
    assert ready_s < 2.0, ready_s


def test_a_changed_litellm_environment_replaces_the_host(server, home, monkeypatch):
    with hosted(server, home) as pool:
        assert pool.complete(opinions_request()).content
        old = host.state(home)["pid"]
    monkeypatch.setenv("LITELLM_JUDGEFLOW_TEST_MARKER", "changed")  # read by litellm at import, in principle
    with hosted(server, home) as pool:
        assert pool.complete(opinions_request()).content
        new = host.state(home)["pid"]
    assert new != old
    assert _wait_gone(old)


def test_a_killed_host_leaves_its_workers_serving_and_the_next_run_starts_another(server, home):
    with hosted(server, home) as pool:
        assert pool.complete(opinions_request()).content
        assert pool.wait_ready()
        dead = host.state(home)["pid"]
        os.kill(dead, signal.SIGKILL)
        assert _wait_gone(dead)
        for _ in range(4):  # the run in flight is not disturbed
            assert pool.complete(opinions_request()).content
        assert pool.worker_starts() == [1, 1]
    assert host.state(home) is None  # a dead host is not reported as running
    with hosted(server, home) as pool:
        assert pool.complete(opinions_request()).content
        assert host.state(home)["pid"] != dead


def test_a_replaced_worker_is_forked_by_the_host(server, home):
    with hosted(server, home) as pool:
        assert pool.complete(opinions_request()).content
        assert pool.wait_ready()
        victim = pool.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while pool.worker_pids()[0] is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        for _ in range(4):
            assert pool.complete(opinions_request()).content
        assert pool.worker_starts()[0] == 2
        assert _parent_pid(pool.worker_pids()[0]) == host.state(home)["pid"]


def test_the_host_exits_after_its_idle_time_and_stop_stops_it(server, home):
    with hosted(server, home, judge_host_idle="1s") as pool:
        assert pool.complete(opinions_request()).content
        pid = host.state(home)["pid"]
        time.sleep(1.5)
        assert _alive(pid), "a host with workers is not idle"
    assert _wait_gone(pid, timeout=15)
    assert host.state(home) is None and not (host.host_dir(home) / host.SOCKET_NAME).exists()

    with hosted(server, home) as pool:
        assert pool.complete(opinions_request()).content
    pid = host.state(home)["pid"]
    assert host.stop(home) is True
    assert not _alive(pid)
    assert host.stop(home) is False


def test_with_the_host_off_the_run_starts_its_own_workers(server, home):
    with JudgeProcessPool(pool_settings(server, home=home, judge_host=False)) as pool:
        assert pool.complete(opinions_request()).content
        assert pool.wait_ready()
        assert _parent_pid(pool.worker_pids()[0]) == os.getpid()
    assert not host.host_dir(home).exists()


def test_a_host_that_cannot_start_falls_back_to_the_runs_own_workers(server, home, monkeypatch):
    monkeypatch.setattr(host, "START_TIMEOUT_S", 0.5)
    monkeypatch.setattr(host, "_spawn", lambda *args: None)  # a host that never binds its socket
    with hosted(server, home) as pool:
        assert pool.complete(opinions_request()).content
        assert pool.wait_ready()
        assert _parent_pid(pool.worker_pids()[0]) == os.getpid()


def test_a_frozen_host_is_replaced_and_the_run_starts_its_own_workers(server, home, monkeypatch):
    with hosted(server, home) as pool:
        assert pool.complete(opinions_request()).content
    frozen = host.state(home)["pid"]
    assert host.state(home)["ready"] is True
    os.kill(frozen, signal.SIGSTOP)  # alive, its socket still accepting, but it never forks
    monkeypatch.setattr(host, "ACK_TIMEOUT_S", 1.0)
    try:
        started = time.monotonic()
        with hosted(server, home) as pool:
            assert pool.complete(opinions_request()).content
            assert pool.wait_ready()
            assert _parent_pid(pool.worker_pids()[0]) == os.getpid()  # the run's own workers
        assert time.monotonic() - started < 30
        assert _wait_gone(frozen), "the frozen host was not stopped"
    finally:
        try:
            os.kill(frozen, signal.SIGKILL)
        except ProcessLookupError:
            pass
    with hosted(server, home) as pool:  # the next run starts a new host
        assert pool.complete(opinions_request()).content
        assert host.state(home)["pid"] != frozen


def test_a_request_that_is_not_a_runs_is_refused_without_holding_its_descriptors(server, home):
    import socket

    with hosted(server, home) as pool:  # a ready host
        assert pool.complete(opinions_request()).content
    read_end, write_end = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(host.host_dir(home) / host.SOCKET_NAME))
        junk = b"not a pickle"
        socket.send_fds(sock, [len(junk).to_bytes(4, "big") + junk], [write_end])
        os.close(write_end)
        sock.settimeout(10)
        assert sock.recv(1) == b""  # no answer: nothing was forked
    with os.fdopen(read_end, "rb") as pipe:
        assert pipe.read() == b""  # EOF: the host closed the descriptor it was sent
    with hosted(server, home) as pool:  # and goes on serving runs
        assert pool.complete(opinions_request()).content


def test_runs_starting_at_once_start_one_host_and_share_it(server, home):
    import threading

    pools = [hosted(server, home) for _ in range(3)]
    errors: list[BaseException] = []

    def start(pool: JudgeProcessPool) -> None:
        try:
            pool.start()
            assert pool.wait_ready()
        except BaseException as exc:  # reported below, from the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(pool,)) for pool in pools]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    try:
        assert not errors, errors
        hosts = {_parent_pid(pid) for pool in pools for pid in pool.worker_pids()}
        assert hosts == {host.state(home)["pid"]}  # one host forked every run's workers
        for pool in pools:
            assert pool.complete(opinions_request()).content
    finally:
        for pool in pools:
            pool.close()


def test_a_host_that_exits_at_once_is_not_waited_for(server, home, monkeypatch):
    import subprocess
    import sys

    def broken(directory, *args):  # e.g. a broken environment: it dies before listening
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"], cwd=directory)

    monkeypatch.setattr(host, "_spawn", broken)
    started = time.monotonic()
    with hosted(server, home) as pool:
        assert pool.complete(opinions_request()).content
        assert pool.wait_ready()
        assert _parent_pid(pool.worker_pids()[0]) == os.getpid()  # the run's own workers
    assert time.monotonic() - started < host.START_TIMEOUT_S / 2


def test_a_home_deeper_than_a_socket_path_allows_still_gets_a_host(server, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "home"  # the socket's path: well over 108 bytes
    assert len(str(host.host_dir(deep) / host.SOCKET_NAME)) > 108
    try:
        with hosted(server, deep) as pool:
            assert pool.complete(opinions_request()).content
            assert pool.wait_ready()
            assert _parent_pid(pool.worker_pids()[0]) == host.state(deep)["pid"]
    finally:
        host.stop(deep)
