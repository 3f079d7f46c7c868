"""The scoring flow under concurrency and failure, with separate processes:
two runs at once, a run SIGKILLed mid-way, the database going away."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from tests.support.traces import first_step_calls, insert_traces, results, scripted_trace

REPO = Path(__file__).resolve().parents[2]
JUDGEFLOW = [sys.executable, "-m", "judgeflow.cli"]


def _env(judgeflow_env: dict, prefect_url: str, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env.update(judgeflow_env)
    env.update(PREFECT_API_URL=prefect_url, **extra)
    return env


def _start_score(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*JUDGEFLOW, "score", "--no-alerts", *args],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _prepare(db, n: int) -> None:
    """Source rows plus judgeflow's schema, so progress can be polled from the start."""
    from judgeflow.db import migrate

    insert_traces(db, [scripted_trace(i)[0] for i in range(n)])
    migrate.upgrade(db)


def _count(db, where: str = "true") -> int:
    with db.connect() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM judgeflow.eval_results WHERE {where}")).scalar_one()


def test_two_runs_started_together_never_score_the_same_pair_twice(prefect_server, judgeflow_env, db, judge_server):
    judge_server.latency_mean_s = 0.02
    _prepare(db, 120)
    env = _env(judgeflow_env, prefect_server)

    procs = [_start_score(env, "--batch-size", "20", "--max-concurrency", "4") for _ in range(2)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]

    assert [p.returncode for p in procs] == [0, 0], outputs
    assert len(results(db)) == 240
    calls = first_step_calls(judge_server)
    assert len(calls) == 240 and set(calls.values()) == {1}, "a (trace, metric) reached the judge twice"
    # both runs did real work (the claims split it rather than one run doing all)
    per_run = collections.Counter(r["flow_run_id"] for r in results(db).values())
    assert len(per_run) == 2 and min(per_run.values()) > 0


def test_a_run_killed_mid_way_is_completed_by_the_next_run_without_rescoring(
    prefect_server, judgeflow_env, db, judge_server
):
    judge_server.latency_mean_s = 0.1
    _prepare(db, 60)
    env = _env(judgeflow_env, prefect_server, JUDGEFLOW_LEASE_TIMEOUT_S="3")

    proc = _start_score(env, "--batch-size", "10", "--max-concurrency", "2")
    deadline = time.monotonic() + 120
    while _count(db) < 20 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {k for k, v in results(db).items() if v["status"] == "scored"}
    assert 20 <= len(done_before) < 120, "the kill must land mid-run"
    calls_before = first_step_calls(judge_server)

    time.sleep(3.5)  # the killed run's leases expire
    rerun = _start_score(env, "--batch-size", "10", "--max-concurrency", "4")
    out = rerun.communicate(timeout=240)[0]
    assert rerun.returncode == 0, out

    stored = results(db)
    assert len(stored) == 120 and all(r["status"] == "scored" for r in stored.values())
    calls_after = first_step_calls(judge_server)
    outputs = {row["id"]: row["output"] for row in (scripted_trace(i)[0] for i in range(60))}
    step = {"toxicity": "Opinions", "hallucination": "HallucinationJudgement"}
    for trace_id, metric in done_before:
        key = (outputs[trace_id], step[metric])
        assert calls_after[key] == calls_before[key] == 1, f"{trace_id}/{metric} was scored again"


def test_database_going_away_mid_run_loses_nothing(prefect_server, judgeflow_env, db, judge_server, pg_server):
    judge_server.latency_mean_s = 0.1
    _prepare(db, 60)
    env = _env(judgeflow_env, prefect_server, JUDGEFLOW_LEASE_TIMEOUT_S="3")

    proc = _start_score(env, "--batch-size", "10", "--max-concurrency", "2")
    deadline = time.monotonic() + 120
    while _count(db) < 10 and time.monotonic() < deadline:
        time.sleep(0.2)
    db.dispose()
    pg_server.kill()  # as a crash would: no clean shutdown
    time.sleep(2)
    pg_server.start()
    out = proc.communicate(timeout=300)[0]
    # the run either rode through the outage or failed saying why
    assert proc.returncode == 0 or "database" in out.lower() or "could not" in out.lower(), out

    time.sleep(3.5)
    rerun = _start_score(env, "--max-concurrency", "4")
    out = rerun.communicate(timeout=240)[0]
    assert rerun.returncode == 0, out
    stored = results(db)
    assert len(stored) == 120 and all(r["status"] == "scored" for r in stored.values())


def _judge_workers(parent: int) -> list[int]:
    """PIDs of the judge worker processes started by ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"judgeflow.judge.worker" in cmdline:
            found.append(int(entry.name))
    return found


def test_a_judge_worker_killed_mid_run_costs_retries_not_results(prefect_server, judgeflow_env, db, judge_server):
    judge_server.latency_mean_s = 0.1
    _prepare(db, 60)
    env = _env(judgeflow_env, prefect_server)

    proc = _start_score(env, "--fanout", "batch", "--judge-processes", "2", "--batch-size", "20",
                        "--max-concurrency", "6")
    deadline = time.monotonic() + 120
    while _count(db) < 20 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    workers = _judge_workers(proc.pid)
    assert len(workers) == 2, "the run should make its judge calls in two worker processes"
    os.kill(workers[0], signal.SIGKILL)
    out = proc.communicate(timeout=240)[0]

    assert proc.returncode == 0, out
    assert "judge worker 0 exited" in out
    stored = results(db)
    assert len(stored) == 120 and all(r["status"] == "scored" for r in stored.values()), out
    # the calls the dead worker had in flight were retried by their pairs, in this run
    assert max(r["attempts"] for r in stored.values()) == 2
    assert len({r["flow_run_id"] for r in stored.values()}) == 1
