"""The scoring flow under concurrency and failure, with separate processes:
two runs at once, a run SIGKILLed mid-way, the database going away."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from judgeflow.db.pending import RUN_LOCK_NAMESPACE
from tests.support.traces import first_step_calls, insert_traces, results, scripted_trace

REPO = Path(__file__).resolve().parents[2]
JUDGEFLOW = [sys.executable, "-m", "judgeflow.cli"]


def _env(judgeflow_env: dict, prefect_url: str, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env.update(judgeflow_env)
    env.update(PREFECT_API_URL=prefect_url)
    env.update(extra)
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
    # ~7 s of judging for one run alone: a run whose start is held up (a Prefect API
    # call answered 503 by the local server's busy sqlite is retried after 2 s) still
    # finds work left to claim
    judge_server.latency_mean_s = 0.05
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


_STEP = {"toxicity": "Opinions", "hallucination": "HallucinationJudgement"}


def _judge_key(n: int) -> dict[tuple[str, str], tuple[str, str]]:
    """(trace id, metric) -> the (output, step) key of first_step_calls."""
    outputs = {row["id"]: row["output"] for row in (scripted_trace(i)[0] for i in range(n))}
    return {(t, m): (outputs[t], step) for t in outputs for m, step in _STEP.items()}


def _status(env: dict) -> dict:
    """`judgeflow status --json`, in this process: the test's environment is the runs'."""
    from typer.testing import CliRunner

    from judgeflow.cli import app

    result = CliRunner().invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["metrics"]


def _ground_truth(db) -> dict:
    """The status figures worked out here, straight from the tables and pg_locks."""
    with db.connect() as conn:
        rows = conn.execute(
            sa.text(
                """
                WITH live AS (
                    SELECT objid::bigint AS k FROM pg_locks
                    WHERE locktype = 'advisory' AND granted AND objsubid = 2
                      AND classid = CAST(CAST(:ns AS int) AS oid)
                ), pairs AS (
                    SELECT m.metric, r.status,
                           c.trace_id IS NOT NULL AS claimed,
                           c.lease_expires_at > now() AND c.owner_key IN (SELECT k FROM live) AS held
                    FROM llm_traces t CROSS JOIN (VALUES ('toxicity'), ('hallucination')) AS m(metric)
                    LEFT JOIN judgeflow.eval_results r ON r.trace_id = t.id AND r.metric = m.metric
                    LEFT JOIN judgeflow.claims c ON c.trace_id = t.id AND c.metric = m.metric
                )
                SELECT metric,
                       count(*) FILTER (WHERE status = 'scored'),
                       count(*) FILTER (WHERE status = 'skipped'),
                       count(*) FILTER (WHERE status = 'failed'),
                       count(*) FILTER (WHERE status IS DISTINCT FROM 'scored' AND status IS DISTINCT FROM 'skipped'
                                        AND held IS NOT TRUE),
                       count(*) FILTER (WHERE status IS DISTINCT FROM 'scored' AND status IS DISTINCT FROM 'skipped'
                                        AND held),
                       count(*) FILTER (WHERE status IS DISTINCT FROM 'scored' AND status IS DISTINCT FROM 'skipped'
                                        AND claimed AND held IS NOT TRUE),
                       count(*) FILTER (WHERE status IS DISTINCT FROM 'scored' AND status IS DISTINCT FROM 'skipped')
                FROM pairs GROUP BY metric
                """
            ),
            {"ns": RUN_LOCK_NAMESPACE},
        ).all()
    keys = ("scored", "skipped", "failed", "pending", "in_progress", "stranded", "not_done")
    return {metric: dict(zip(keys, figures)) for metric, *figures in rows}


def _assert_status_is_true(env: dict, db) -> dict:
    status, truth = _status(env), _ground_truth(db)
    for metric, want in truth.items():
        got = status[metric]
        assert {k: got[k] for k in want if k != "not_done"} == {k: v for k, v in want.items() if k != "not_done"}, (
            metric, got, want)
        assert got["pending"] + got["in_progress"] == want["not_done"]
    return truth


def _run_locks(db) -> int:
    with db.connect() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                    "AND classid = CAST(CAST(:ns AS int) AS oid)"),
            {"ns": RUN_LOCK_NAMESPACE},
        ).scalar_one()


def _wait_for(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _release_until(judge_server, proc: subprocess.Popen, predicate, what: str, timeout: float = 120) -> None:
    """The judge holding its replies (``judge_server.hold()``): let the calls held go, a few at a
    time, until ``predicate()`` holds, then until the run has a call held again. The run is then
    mid-way by construction, with judge calls in flight, whatever the machine's speed: no
    latency set to make it last long enough."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[0][-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if judge_server.held:
            judge_server.release(judge_server.held)  # and hold on
        time.sleep(0.05)
    judge_server.wait_until(lambda s: s.held > 0, f"a judge call held after {what}", timeout)


def test_a_killed_runs_pairs_are_taken_over_at_once_and_status_tells_the_truth_throughout(
    prefect_server, judgeflow_env, db, judge_server
):
    _prepare(db, 60)
    # the default 15-minute lease: the rerun must not wait for it
    env = _env(judgeflow_env, prefect_server)
    before = _assert_status_is_true(env, db)
    assert before["toxicity"]["pending"] == 60 and before["toxicity"]["in_progress"] == 0

    judge_server.hold()  # the run goes as far as the test lets its judge calls go
    proc = _start_score(env, "--batch-size", "10", "--max-concurrency", "3")
    _release_until(judge_server, proc, lambda: _count(db) >= 30, "a third of the pairs")
    os.kill(proc.pid, signal.SIGSTOP)  # hold the run still while status and the truth are compared
    try:
        during = _assert_status_is_true(env, db)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert sum(m["in_progress"] for m in during.values()) > 0, during

    _release_until(judge_server, proc, lambda: _count(db) >= 72, "60% of the pairs")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    judge_server.release()  # the killed run's held calls answer no one; the rerun's are not held
    _wait_for(lambda: _run_locks(db) == 0, "the server to end the killed run's session")
    done_before = {k for k, v in results(db).items() if v["status"] == "scored"}
    assert 72 <= len(done_before) < 120, "the kill must land mid-run"
    with db.connect() as conn:
        in_flight = {tuple(r) for r in conn.execute(sa.text(
            "SELECT c.trace_id, c.metric FROM judgeflow.claims c LEFT JOIN judgeflow.eval_results r "
            "USING (trace_id, metric) WHERE r.trace_id IS NULL"))}
    after_kill = _assert_status_is_true(env, db)
    assert sum(m["stranded"] for m in after_kill.values()) == len(in_flight) > 0
    assert sum(m["in_progress"] for m in after_kill.values()) == 0
    calls_before = first_step_calls(judge_server)

    rerun = _start_score(env, "--batch-size", "10", "--max-concurrency", "4")
    out = rerun.communicate(timeout=300)[0]
    assert rerun.returncode == 0, out

    stored = results(db)
    assert len(stored) == 120 and all(r["status"] == "scored" for r in stored.values()), out
    after = _assert_status_is_true(env, db)
    assert all(m["pending"] == m["in_progress"] == m["stranded"] == 0 for m in after.values())
    calls_after = first_step_calls(judge_server)
    keys = _judge_key(60)
    judged_twice = {pair for pair, key in keys.items() if calls_after[key] > 1}
    # nothing scored before the kill reached the judge again; only the pairs in
    # flight at the kill (judged, not yet written) may have been judged twice
    assert all(calls_after[keys[pair]] == calls_before[keys[pair]] == 1 for pair in done_before)
    assert judged_twice <= in_flight, judged_twice - in_flight
    assert all(calls_after[key] <= 2 for key in keys.values())
    assert "left to other live runs | 0" in out


# ~100 s (two `judgeflow score` processes and a lease wait): kept out of the
# default run for the suite's 10-minute budget; the owner check and the
# superseded record are covered by tests/tasks/test_claims.py by default
@pytest.mark.slow
def test_a_run_frozen_past_its_lease_loses_its_pairs_and_its_late_results_are_only_recorded(
    prefect_server, judgeflow_env, db, judge_server
):
    judge_server.latency_mean_s = 0.3
    _prepare(db, 40)
    # a short lease, and a judge timeout the freeze cannot trip
    env = _env(judgeflow_env, prefect_server, JUDGEFLOW_LEASE_TIMEOUT_S="4", JUDGEFLOW_JUDGE_TIMEOUT_S="120")

    frozen = _start_score(env, "--batch-size", "10", "--max-concurrency", "4")
    _wait_for(lambda: _count(db) >= 10 or frozen.poll() is not None, "a first results")
    _wait_for(lambda: judge_server.in_flight > 0 or frozen.poll() is not None, "a judge call in flight")
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        # its lock is still held (the process is alive): only the lease can free its claims
        with db.connect() as conn:
            frozen_owner = conn.execute(sa.text("SELECT min(owner) FROM judgeflow.claims")).scalar_one()
        assert frozen_owner is not None
        _wait_for(lambda: _leases_running(db, frozen_owner) == 0, "the lease to run out")
        second = _start_score(env, "--batch-size", "10", "--max-concurrency", "4")
        out_second = second.communicate(timeout=300)[0]
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    out_frozen = frozen.communicate(timeout=300)[0]
    assert second.returncode == 0, out_second
    assert frozen.returncode == 0, out_frozen

    stored = results(db)
    assert len(stored) == 80 and all(r["status"] == "scored" for r in stored.values())
    with db.connect() as conn:
        late = conn.execute(
            sa.text("SELECT trace_id, metric, flow_run_id, owner FROM judgeflow.superseded_results")
        ).all()
    frozen_run = frozen_owner.split(":")[0]
    assert late, "the frozen run had work in flight: its results must be recorded as superseded"
    assert {r.owner for r in late} == {frozen_owner}
    # the stored result of every superseded pair is the second run's
    assert all(stored[(r.trace_id, r.metric)]["flow_run_id"] != frozen_run for r in late)
    # every pair that reached the judge twice has its late copy recorded
    calls = first_step_calls(judge_server)
    keys = _judge_key(40)
    judged_twice = {pair for pair, key in keys.items() if calls[key] > 1}
    assert judged_twice and judged_twice <= {(r.trace_id, r.metric) for r in late}
    assert sum(calls[keys[p]] - 1 for p in keys) <= len(late)
    # and the frozen run says so; what it had claimed but not started when it
    # froze it did not judge at all once it saw the claims had moved
    assert f"superseded | {len(late)} |" in out_frozen, out_frozen
    assert "taken over by another run |" in out_frozen


def _leases_running(db, owner: str) -> int:
    with db.connect() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM judgeflow.claims WHERE owner = :o AND lease_expires_at > now()"),
            {"o": owner},
        ).scalar_one()


def _live_leases(db) -> int:
    with db.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims WHERE lease_expires_at > now()")
                            ).scalar_one()


def test_database_going_away_mid_run_loses_nothing(prefect_server, judgeflow_env, db, judge_server, pg_server):
    _prepare(db, 60)
    env = _env(judgeflow_env, prefect_server, JUDGEFLOW_LEASE_TIMEOUT_S="3")

    judge_server.hold()  # the run goes as far as the test lets its judge calls go
    proc = _start_score(env, "--batch-size", "10", "--max-concurrency", "2")
    _release_until(judge_server, proc, lambda: _count(db) >= 10, "the first results")
    db.dispose()
    pg_server.kill()  # as a crash would: no clean shutdown
    judge_server.release()  # the calls in flight answer while the database is gone: their results meet the outage
    time.sleep(2)
    pg_server.start()
    out = proc.communicate(timeout=300)[0]
    # the run either rode through the outage or failed saying why
    assert proc.returncode == 0 or "database" in out.lower() or "could not" in out.lower(), out

    # the first run's leases (3 s, no longer renewed) run out: the rerun may take every pair
    deadline = time.monotonic() + 120
    while _live_leases(db):
        assert time.monotonic() < deadline, "the first run's leases never ran out"
        time.sleep(0.2)
    rerun = _start_score(env, "--max-concurrency", "4")
    out = rerun.communicate(timeout=240)[0]
    assert rerun.returncode == 0, out
    stored = results(db)
    assert len(stored) == 120 and all(r["status"] == "scored" for r in stored.values())


def _judge_workers(parent: int) -> list[int]:
    """PIDs of the judge worker processes of the run ``parent``: the children
    of the multiprocessing fork server the run started."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdlines[int(entry.name)] = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    servers = [pid for pid in children.get(parent, []) if b"multiprocessing.forkserver" in cmdlines.get(pid, b"")]
    return [pid for server in servers for pid in children.get(server, [])]


def test_a_judge_worker_killed_mid_run_costs_retries_not_results(prefect_server, judgeflow_env, db, judge_server):
    judge_server.latency_mean_s = 0.1
    _prepare(db, 60)
    env = _env(judgeflow_env, prefect_server)

    proc = _start_score(env, "--judge-processes", "2", "--batch-size", "20",
                        "--max-concurrency", "6")
    try:
        deadline = time.monotonic() + 120
        while _count(db) < 20 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        workers = _judge_workers(proc.pid)
        assert len(workers) == 2, "the run should make its judge calls in two worker processes"
        os.kill(workers[0], signal.SIGKILL)
        out = proc.communicate(timeout=240)[0]
    finally:
        proc.kill()

    assert proc.returncode == 0, out
    assert "judge worker 0 exited" in out
    stored = results(db)
    assert len(stored) == 120 and all(r["status"] == "scored" for r in stored.values()), out
    # the calls the dead worker had in flight were attempted again by the run's one retry loop over
    # attempts (judgeflow/judge/retry.py), in this run: no pair had to be run again
    assert re.search(r"judge worker 0 exited \(code -9\) with [1-9]\d* call\(s\) in flight", out), out
    assert max(r["attempts"] for r in stored.values()) == 1
    assert len({r["flow_run_id"] for r in stored.values()}) == 1
