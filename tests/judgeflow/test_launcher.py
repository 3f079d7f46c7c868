"""The `judgeflow` command's entry point (judgeflow/launcher.py): `judgeflow
score` handed to a ready judge host, which forks the run from a process that
has Prefect, litellm and judgeflow imported. Real PostgreSQL, Prefect server,
judge server and host; the command runs as `python -m judgeflow`, as the
console script does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from judgeflow.judge import host
from judgeflow.judge.process_pool import JudgeProcessPool
from judgeflow.launcher import host_takes
from judgeflow.local_process import wait_gone
from tests.judge.test_process_pool import pool_settings
from tests.support.traces import first_step_calls, insert_traces, results, scripted_trace

FORKED = re.compile(r"forked pid (\d+) for `judgeflow (\w+)`")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """One JUDGEFLOW_HOME, and so one judge host, for this module's tests (a
    host takes seconds to start); each test has its own database."""
    home = tmp_path_factory.mktemp("launcher") / "home"
    yield home
    host.stop(home)


@pytest.fixture
def env(judgeflow_env, prefect_server, home):
    """A `judgeflow` command's environment: the test database and judge server,
    the judge host on (the suite turns it off everywhere else)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env.update(judgeflow_env, PREFECT_API_URL=prefect_server, JUDGEFLOW_JUDGE_PROCESSES="2",
               JUDGEFLOW_HOME=str(home))
    return env


def judgeflow(env: dict, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "judgeflow", *args], env=env, cwd=os.getcwd(),
                          capture_output=True, text=True, timeout=300, **kwargs)


def ready_host(judge_server, home: Path) -> int:
    """The judge host under ``home``, started as a run's judge pool starts it if
    none is running, and ready for runs (it imports Prefect and the flows once idle)."""
    if host.state(home) is None:
        pool = JudgeProcessPool(pool_settings(judge_server, home=home, judge_host=True)).start()
        try:
            assert pool.wait_ready(300)
        finally:
            pool.close()
    deadline = time.monotonic() + 300
    while not (host.state(home) or {}).get("runs"):
        assert time.monotonic() < deadline, (home / "judge-host" / host.LOG_NAME).read_text()[-3000:]
        time.sleep(0.1)
    return int(host.state(home)["pid"])


def forked(home: Path) -> list[tuple[int, str]]:
    """(pid, command) of every command the host forked, from its log."""
    log = (home / "judge-host" / host.LOG_NAME).read_text()
    return [(int(pid), command) for pid, command in FORKED.findall(log)]


def test_host_takes_score_unless_turned_off_in_the_environment_or_dotenv(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_HOST", "true")
    assert host_takes(["score", "--limit", "3"])
    assert not host_takes(["status"]) and not host_takes([])
    monkeypatch.setenv("judgeflow_judge_host", "Off")  # any case, as the settings object reads it
    monkeypatch.delenv("JUDGEFLOW_JUDGE_HOST")
    assert not host_takes(["score"])
    monkeypatch.delenv("judgeflow_judge_host")
    (tmp_path / ".env").write_text("JUDGEFLOW_JUDGE_HOST=0\n")
    assert not host_takes(["score"])
    monkeypatch.setenv("JUDGEFLOW_JUDGE_HOST", "yes")  # the environment wins over .env
    assert host_takes(["score"])


def test_score_runs_in_a_process_the_ready_host_forks(env, home, db, judge_server, tmp_path):
    insert_traces(db, [scripted_trace(i)[0] for i in range(20)])
    host_pid = ready_host(judge_server, home)
    judge_server.requests.clear()
    status = judgeflow(env, "status")
    assert f"judge host: running, pid {host_pid}, runs `judgeflow score`" in status.stdout, status.stdout

    earlier = len(forked(home))
    done = judgeflow(env, "score", "--no-alerts")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    (run_pid, command), = forked(home)[earlier:]
    assert command == "score"
    # the command's own output, on the caller's streams: the summary on stdout, the logs on stderr
    assert "# judgeflow run" in done.stdout and "| scores written | 40 |" in done.stdout
    assert "Beginning flow run" in done.stderr
    assert len(results(db)) == 40 and {r["status"] for r in results(db).values()} == {"scored"}
    assert set(first_step_calls(judge_server).values()) == {1}
    assert wait_gone(run_pid, 60), "the forked run outlived its command"
    assert host.state(home)["pid"] == host_pid

    # its exit code and error output are the caller's
    bad = judgeflow(env, "score", "--limit", "many")
    assert bad.returncode == 2 and "Invalid value" in bad.stderr, bad.stderr
    assert len(forked(home)) == earlier + 2

    # not handed over: turned off in the environment, or in .env, or other code or settings than the host's
    for how in ({"JUDGEFLOW_JUDGE_HOST": "false"}, {"LITELLM_SOMETHING_ELSE": "1"}):
        done = judgeflow({**env, **how}, "score", "--no-alerts")
        assert done.returncode == 0 and "nothing to score" in done.stdout, done.stdout + done.stderr
        assert len(forked(home)) == earlier + 2, how
    (tmp_path / ".env").write_text("JUDGEFLOW_JUDGE_HOST=false\n")
    done = judgeflow(env, "score", "--no-alerts")
    assert done.returncode == 0 and "nothing to score" in done.stdout
    assert len(forked(home)) == earlier + 2
    (tmp_path / ".env").unlink()
    # a closed standard stream (cron's <&-) cannot be handed over: the command runs here, the host lives on
    done = judgeflow(env, "score", "--no-alerts", preexec_fn=lambda: os.close(0))
    assert done.returncode == 0 and "nothing to score" in done.stdout, done.stdout + done.stderr
    assert len(forked(home)) == earlier + 2 and host.state(home)["pid"] == host_pid

    # the caller's Prefect logging settings, not the host's: nothing below WARNING on stderr
    insert_traces(db, [scripted_trace(i)[0] for i in range(20, 25)])
    quiet = judgeflow({**env, "PREFECT_LOGGING_LEVEL": "WARNING"}, "score", "--no-alerts")
    assert quiet.returncode == 0 and "| scores written | 10 |" in quiet.stdout, quiet.stdout + quiet.stderr
    assert len(forked(home)) == earlier + 3
    assert "Beginning flow run" not in quiet.stderr and "INFO" not in quiet.stderr, quiet.stderr[-2000:]


def _scored(db: sa.Engine) -> int:
    with db.connect() as conn:
        if conn.execute(sa.text("SELECT to_regclass('judgeflow.eval_results')")).scalar() is None:
            return 0  # the run has not created judgeflow's tables yet
        return conn.execute(sa.text("SELECT count(*) FROM judgeflow.eval_results WHERE status = 'scored'")).scalar()



def test_a_run_in_the_host_stops_with_its_caller_and_the_next_run_finishes_the_work(env, home, db, judge_server):
    insert_traces(db, [scripted_trace(i)[0] for i in range(60)])
    host_pid = ready_host(judge_server, home)
    for how in ("ctrl-c", "caller killed"):
        judge_server.latency_mean_s = 0.3  # what is left at 8 calls in flight: seconds
        earlier, scored_before = len(forked(home)), _scored(db)
        caller = subprocess.Popen([sys.executable, "-m", "judgeflow", "score", "--no-alerts", "--batch-size", "10"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while _scored(db) <= scored_before:
                assert caller.poll() is None and time.monotonic() < deadline, caller.communicate()
                time.sleep(0.1)
            (run_pid, _), = forked(home)[earlier:]
            if how == "ctrl-c":
                caller.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends the caller
                _, err = caller.communicate(timeout=120)
                assert caller.returncode == 130, err[-3000:]
                assert "Crashed('Execution was aborted by an interrupt signal.')" in err  # as a run of its own ends
            else:
                caller.kill()  # SIGKILL: nothing to pass on; the run notices its caller is gone
                caller.wait(timeout=30)
            assert wait_gone(run_pid, 60), f"the run outlived its caller ({how})"
            assert _scored(db) < 120, f"the run was not stopped early ({how})"
        finally:
            if caller.poll() is None:
                caller.kill()
        assert host.state(home)["pid"] == host_pid  # the host itself lives on

    judge_server.latency_mean_s = 0.0
    done = judgeflow(env, "score", "--no-alerts")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = results(db)
    assert len(rows) == 120 and {r["status"] for r in rows.values()} == {"scored"}
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar() == 0


def test_a_frozen_host_is_stopped_and_the_command_runs_in_its_own_process(home, judge_server, monkeypatch, capfd):
    frozen = ready_host(judge_server, home)
    os.kill(frozen, signal.SIGSTOP)  # alive, its socket still accepting, but it never forks
    monkeypatch.setattr(host, "ACK_TIMEOUT_S", 1.0)
    try:
        started = time.monotonic()
        assert host.run_command(home, ["score", "--no-alerts"]) is None  # the caller runs it itself
        assert time.monotonic() - started < 30
        assert wait_gone(frozen, timeout_s=30), "the frozen host was not stopped"
        assert host.state(home) is None  # so the run's own request for workers starts a new one at once
        assert f"the judge host (pid {frozen}) did not take the command within 1 s" in capfd.readouterr().err
    finally:
        try:
            os.kill(frozen, signal.SIGKILL)
        except ProcessLookupError:
            pass
