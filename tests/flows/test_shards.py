"""A night in shards, end to end: `judgeflow score --shards 2` in a process of its
own against the suite's Prefect server, PostgreSQL and judge server. With no work
pool serving score-shard/shards, the command serves its own shard deployment
(Prefect's Runner) and the two children are flow runs of their own, each a process,
under the parent in Prefect; every pair is judged once; the parent writes the one
summary. A child SIGKILLed mid-night loses no pair and pays for none twice that was
not on the wire when it died."""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support.traces import first_step_calls, insert_traces, results, scripted_trace

REPO = Path(__file__).resolve().parents[2]
JUDGEFLOW = [sys.executable, "-m", "judgeflow.cli"]


def _env(judgeflow_env: dict, prefect_url: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env.update(judgeflow_env, PREFECT_API_URL=prefect_url)
    return env


def _start_score(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*JUDGEFLOW, "score", "--no-alerts", *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _prepare(db, n: int) -> None:
    from judgeflow.db import migrate

    insert_traces(db, [scripted_trace(i)[0] for i in range(n)])
    migrate.upgrade(db)


def _stored_judge_calls(db) -> int:
    with db.connect() as conn:
        return conn.execute(sa.text("SELECT sum(judge_calls) FROM judgeflow.eval_results")).scalar_one()


def _family(child_ids: set[str]):
    """The children's flow runs and the one parent they were started under."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        children = [client.read_flow_run(run_id) for run_id in child_ids]
        parents = {client.read_task_run(child.parent_task_run_id).flow_run_id for child in children}
        assert len(parents) == 1, parents
        [parent_id] = parents
        parent = client.read_flow_run(parent_id)
        parent_flow = client.read_flow(parent.flow_id).name
        siblings = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])))
        artifacts = client.read_artifacts()
    reports = [a for a in artifacts if str(a.flow_run_id) == str(parent_id) and a.key == "judgeflow-run-report"]
    return parent, parent_flow, siblings, reports


# ~75 s on a loaded 2-core machine (a parent, a shard server and two child processes, each importing
# Prefect and judgeflow): outside the default run for the suite's 10-minute budget; the default run
# keeps the children's start (run_deployment, idempotency keys) and cancel: tests/tasks/test_shards.py
@pytest.mark.slow
def test_two_shards_score_the_backlog_once_as_children_of_one_parent(prefect_server, judgeflow_env, db,
                                                                     judge_server):
    judge_server.latency_mean_s = 0.05
    _prepare(db, 30)
    proc = _start_score(_env(judgeflow_env, prefect_server), "--shards", "2", "--batch-size", "6",
                        "--max-concurrency", "2")
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out

    stored = results(db)
    assert len(stored) == 60 and all(r["status"] == "scored" for r in stored.values()), out
    calls = first_step_calls(judge_server)
    assert len(calls) == 60 and set(calls.values()) == {1}, "a (trace, metric) reached the judge twice"
    # every call the judge server answered is on a stored row: no call made outside the night's pairs
    assert judge_server.calls() == _stored_judge_calls(db)

    children = collections.Counter(r["flow_run_id"] for r in stored.values())
    parent, parent_flow, siblings, reports = _family(set(children))
    assert parent_flow == "score-new-traces"
    assert sorted(run.name.rsplit("/", 1)[1].split(" ", 1)[1] for run in siblings) == ["shard 1 of 2",
                                                                                        "shard 2 of 2"]
    assert set(children) <= {str(run.id) for run in siblings}
    assert {run.state.type.value for run in siblings} == {"COMPLETED"}
    assert parent.state.type.value == "COMPLETED"
    [report] = reports  # the parent's one summary, with a row per shard
    for text in (report.data, out):
        assert "## Shards" in text and "| 1 of 2 |" in text and "| 2 of 2 |" in text
        assert re.search(r"\| scores written \| 60 \|", text), text

    # the command's own shard deployment and its server are gone with the night
    served = re.search(r"child flow runs of (score-shard/local-\w+), served here \(pid (\d+)\)", out)
    assert served, out
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client, pytest.raises(ObjectNotFound):
        client.read_deployment_by_name(served.group(1))
    _wait_for(lambda: not os.path.exists(f"/proc/{served.group(2)}"), "the shard server to exit", 30)


def _wait_for(predicate, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _running_children():
    """The running flow runs of the score-shard flow started by a sharded night."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=["RUNNING"]))))
    return [run for run in runs if " shard " in run.name]


def _process_of(flow_run_id) -> int:
    """The process running ``flow_run_id``: Prefect's Runner hands it PREFECT__FLOW_RUN_ID."""
    wanted = f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                return int(entry.name)
        except OSError:
            continue
    raise AssertionError(f"no process runs flow run {flow_run_id}")


# ~65 s (as above, one child killed): outside the default run
@pytest.mark.slow
def test_a_killed_shard_loses_no_pair_and_the_parent_names_it(prefect_server, judgeflow_env, db, judge_server):
    _prepare(db, 40)
    judge_server.hold()
    proc = _start_score(_env(judgeflow_env, prefect_server), "--shards", "2", "--batch-size", "4",
                        "--max-concurrency", "2")
    try:
        # both children judging: two calls each held at the judge server
        judge_server.wait_until(lambda s: s.held >= 4, "both shards' first calls", timeout_s=300)
        _wait_for(lambda: len(_running_children()) == 2, "both children running")
        victim = _running_children()[0]
        on_the_wire = set(first_step_calls(judge_server))
        os.kill(_process_of(victim.id), signal.SIGKILL)
        judge_server.release()
        out = proc.communicate(timeout=600)[0]
    finally:
        judge_server.release()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out

    stored = results(db)
    assert len(stored) == 80 and all(r["status"] == "scored" for r in stored.values()), out
    calls = first_step_calls(judge_server)
    assert len(calls) == 80
    twice = {key for key, n in calls.items() if n > 1}
    # only a call the dead shard had on the wire can have been paid for twice
    assert twice <= on_the_wire and all(n <= 2 for n in calls.values()), twice - on_the_wire
    assert f"(flow run {victim.id}) ended Crashed" in out, out


# ~1-2 min (a process work pool's worker, a parent and two children): outside the default run
@pytest.mark.slow
def test_a_work_pool_serving_the_shard_deployment_runs_the_children(prefect_server, judgeflow_env, db,
                                                                    judge_server):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.types.entrypoint import EntrypointType

    from judgeflow.cli.shards import pooled_deployment
    from judgeflow.flows.shards import score_shard

    _prepare(db, 20)
    env = _env(judgeflow_env, prefect_server)
    pool = f"shards-{os.getpid()}"
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        queue = client.read_work_queue_by_name("default", work_pool_name=pool).id
    deployment_id = score_shard.to_deployment(name="shards", entrypoint_type=EntrypointType.MODULE_PATH).apply(
        work_pool_name=pool)
    worker = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type",
                               "process"], env={**env, "PREFECT_WORKER_QUERY_SECONDS": "1"}, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(lambda: pooled_deployment() == "score-shard/shards", "the worker to make the pool ready")
        proc = _start_score(env, "--shards", "2", "--batch-size", "5", "--max-concurrency", "2")
        out = proc.communicate(timeout=600)[0]
        stored = results(db)
        with get_client(sync_client=True) as client:  # before the pool (and its queue) is deleted
            children = [client.read_flow_run(run_id) for run_id in {r["flow_run_id"] for r in stored.values()}]
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
        with get_client(sync_client=True) as client:
            client.delete_deployment(deployment_id)  # no later test finds a pool nobody serves
            client.delete_work_pool(pool)
    assert proc.returncode == 0, out
    assert "2 child flow runs of score-shard/shards, on its work pool" in out

    assert len(stored) == 40 and all(r["status"] == "scored" for r in stored.values()), out
    assert set(first_step_calls(judge_server).values()) == {1}
    # taken from the pool's queue: its worker is the only process that serves it
    assert children and {child.work_queue_id for child in children} == {queue}


def _pair_estimates(traces: list[dict]) -> float:
    """What the cost model estimates every pair of ``traces`` at, at the test's prices."""
    from judgeflow.judge.pricing import Prices
    from judgeflow.model import TraceWork
    from judgeflow.run.budget import RunBudget

    estimator = RunBudget(1.0, Prices(input_per_mtok=100.0, output_per_mtok=200.0, source="test"))
    return sum(estimator.estimate(TraceWork(trace_id=t["id"], metric=m, created_at=t["created_at"], input=t["input"],
                                            output=t["output"], context=t["context"]))[0]
               for t in traces for m in ("toxicity", "hallucination"))


# ~2-3 min (two nights of two shards each): outside the default run; the default run keeps the shared
# ledger itself, two budgets and two trace counts against the real database: tests/db/test_night_ledger.py
@pytest.mark.slow
def test_the_budget_and_the_limit_hold_for_the_night_across_two_shards(prefect_server, judgeflow_env, db,
                                                                        judge_server):
    judge_server.prices_per_mtok = (100.0, 200.0)
    judge_server.latency_mean_s = 0.5  # neither shard spends the budget before the other has started
    traces = [scripted_trace(i)[0] for i in range(40)]
    insert_traces(db, traces)
    from judgeflow.db import migrate

    migrate.upgrade(db)
    env = _env(judgeflow_env, prefect_server)
    env.update(JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK="100", JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK="200")
    budget = 0.4 * _pair_estimates(traces)  # either shard alone could spend it: 20 traces each

    proc = _start_score(env, "--shards", "2", "--budget-usd", f"{budget:.6f}", "--batch-size", "4",
                        "--max-concurrency", "2")
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    billed = judge_server.billed_usd
    # the night's budget, spent to the pair: admitted on estimates, so what ran costs about what was reserved
    # (a run's own bound, docs/running.md); each shard holding it alone would have spent up to twice it
    assert 0.95 * budget <= billed <= 1.1 * budget, (billed, budget, out)
    stored = results(db)
    assert 0 < len(stored) < 80  # work was left
    assert len({r["flow_run_id"] for r in stored.values()}) == 2  # by both shards
    assert re.search(r"\| budget \(USD\) \| \$[0-9.]+ of \$[0-9.]+ spent", out), out  # the night's, once

    # --limit 6: six traces for the night (of those the first night left), not six a shard
    judge_server.latency_mean_s = 0.05
    proc = _start_score(env, "--shards", "2", "--limit", "6", "--batch-size", "2", "--max-concurrency", "2")
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    new = {key: row for key, row in results(db).items() if key not in stored}
    assert len({trace for trace, _ in new}) == 6 and 6 <= len(new) <= 12, out


# ~1-2 min: outside the default run
@pytest.mark.slow
def test_cancelling_the_parent_in_prefect_cancels_the_shards_and_loses_no_pair(prefect_server, judgeflow_env, db,
                                                                               judge_server):
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    judge_server.latency_mean_s = 1.0  # a night of ~1 minute a shard: the cancel comes well before its end
    _prepare(db, 60)
    proc = _start_score(_env(judgeflow_env, prefect_server), "--shards", "2", "--batch-size", "4",
                        "--max-concurrency", "2")
    try:
        _wait_for(lambda: len(_running_children()) == 2, "both children running")
        _wait_for(lambda: len(results(db)) >= 2, "the shards' first results")
        children = _running_children()
        with get_client(sync_client=True) as client:
            parent = client.read_task_run(children[0].parent_task_run_id).flow_run_id
            # what the UI's Cancel does: the flow run to Cancelling
            client.set_flow_run_state(parent, Cancelling(message="cancelled in the UI"), force=True)
        out = proc.communicate(timeout=300)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    with get_client(sync_client=True) as client:
        states = [client.read_flow_run(child.id).state for child in children]
        parent_state = client.read_flow_run(parent).state
    assert all(state.is_cancelled() for state in states), [s.name for s in states]
    assert parent_state.is_cancelled() or parent_state.is_cancelling(), parent_state.name
    first = results(db)
    assert 0 < len(first) < 120, out  # cancelled part-way
    assert "the night's flow run was cancelled" in out and "**Cancelled.**" in out and "**Stopped (Ctrl-C).**" not in out, out
    # nothing paid and lost: every call the judge answered is on a stored row
    assert judge_server.calls() == _stored_judge_calls(db), out

    # the rest is pending for the next run, and no pair is judged twice
    judge_server.latency_mean_s = 0.05
    proc = _start_score(_env(judgeflow_env, prefect_server), "--max-concurrency", "8")
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    assert len(results(db)) == 120
    assert set(first_step_calls(judge_server).values()) == {1}
