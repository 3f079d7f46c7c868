"""The scoring flow end to end: real PostgreSQL, real Prefect engine and API,
litellm over real HTTP to the local judge server."""

from __future__ import annotations

import collections
import json
import re
import time

import pytest

from judgeflow.flows.scoring import score_new_traces
from tests.support.traces import first_step_calls, insert_traces, results, scripted_trace


@pytest.fixture
def run(prefect_server, judgeflow_env):
    def _run(**params):
        params.setdefault("evaluate_alerts", False)
        return score_new_traces(**params)

    return _run


def _each_scored_exactly_once(db, judge_server, summary, rows, expected) -> dict:
    """Every pair stored once, scored with the scripted judge's score on the first attempt, and
    asked of the judge once: the stored results."""
    stored = results(db)
    assert len(stored) == 2 * len(rows)
    for row, want in zip(rows, expected):
        for metric in ("toxicity", "hallucination"):
            got = stored[(row["id"], metric)]
            assert got["status"] == "scored", got["error"]
            assert got["score"] == pytest.approx(want[metric]), (row["id"], metric)
            assert got["passed"] == (want[metric] <= 0.5)
            assert got["attempts"] == 1
            assert got["judge_model"] == "openai/judge-test"
            assert got["trace_created_at"] == row["created_at"]
    assert summary.scored == 2 * len(rows) and summary.failed == 0 and summary.traces == len(rows)
    # every trace reached the judge once per metric, never twice
    assert set(first_step_calls(judge_server).values()) == {1}
    assert len(first_step_calls(judge_server)) == 2 * len(rows)
    return stored


# in the run's process; in two judge worker processes: test_calls_queued_ahead_never_exceed_max_concurrency_at_the_judge
def test_200_traces_each_scored_exactly_once_with_the_scripted_scores(run, db, judge_server):
    rows, expected = zip(*(scripted_trace(i) for i in range(200)))
    insert_traces(db, rows)

    summary = run(batch_size=50, max_concurrency=8)

    stored = _each_scored_exactly_once(db, judge_server, summary, rows, expected)
    # toxicity details carry the intermediate steps
    first = stored[("tr-0000", "toxicity")]
    assert len(first["details"]["opinions"]) == 2
    assert [v["verdict"] for v in first["details"]["verdicts"]] == ["yes", "no"]


def test_a_batch_judges_its_longest_chains_of_calls_first(run, db, judge_server):
    # one call at a time (plus the one the judge holds ready): toxicity pairs
    # (opinions, verdicts, reason) take their slots before the batch's
    # single-call hallucination pairs, whatever the claim order, so a batch (and
    # the run) ends on single calls. Each call takes 50 ms at the judge: a toxicity
    # pair's next call is queued while the call that took the freed slot is on the
    # wire, not raced against it by a reply parsed on a loaded machine
    judge_server.latency_mean_s = 0.05
    insert_traces(db, [scripted_trace(i)[0] for i in range(6)])

    run(batch_size=12, max_concurrency=1, judge_processes=1)

    steps = [r.step for r in judge_server.requests]
    assert steps.count("HallucinationJudgement") == 6 and steps.count("Opinions") == 6
    last_opinions = max(i for i, step in enumerate(steps) if step == "Opinions")
    assert last_opinions < steps.index("HallucinationJudgement"), steps
    assert steps[-3:] == ["HallucinationJudgement"] * 3, steps
    assert judge_server.max_in_flight == 1
    assert len(results(db)) == 12


@pytest.mark.parametrize("judge_processes", [1, 2], ids=["in-process", "2procs"])
def test_calls_queued_ahead_never_exceed_max_concurrency_at_the_judge(run, db, judge_server, judge_processes):
    # every pair starts and its calls wait for the judge's slots; the judge
    # holds the extra calls until a slot frees (on the wire only, by default)
    judge_server.latency_mean_s = 0.05
    rows, expected = zip(*(scripted_trace(i) for i in range(60)))
    insert_traces(db, rows)

    summary = run(batch_size=40, max_concurrency=4, judge_processes=judge_processes)

    assert judge_server.max_in_flight == 4
    # and each pair scored exactly once (the calls of the 2procs case made in two worker processes)
    _each_scored_exactly_once(db, judge_server, summary, rows, expected)


def test_judge_faults_are_absorbed_and_a_hopeless_trace_is_stored_as_failed(
    run, db, judge_server, monkeypatch
):
    monkeypatch.setenv("JUDGEFLOW_JUDGE_TIMEOUT_S", "1")
    rows = [scripted_trace(i)[0] for i in range(60)]
    rows.append({"id": "tr-doomed", "output": "This always breaks [judge-fail:500]."})
    insert_traces(db, rows)
    judge_server.fault_rates = {"429": 0.03, "500": 0.03, "garbage": 0.03, "stall": 0.01}
    judge_server.stall_s = 3

    summary = run(batch_size=25, max_concurrency=6)

    stored = results(db)
    assert len(stored) == 122
    doomed = [stored[("tr-doomed", m)] for m in ("toxicity", "hallucination")]
    for row in doomed:
        assert row["status"] == "failed"
        # its forced 500s, or on the last attempt one of the random 429s
        assert re.search(r"HTTP (500|429)", row["error"]) and row["error_kind"] == "judge_unavailable"
        assert row["attempts"] == 3  # the task's first try and its two retries
    others = [r for (tid, _), r in stored.items() if tid != "tr-doomed"]
    assert all(r["status"] == "scored" for r in others), [r["error"] for r in others if r["status"] != "scored"]
    assert summary.failed == 2 and summary.scored == 120
    faults = collections.Counter(r.step for r in judge_server.requests)
    assert sum(faults.values()) > 120  # faults really happened and were retried


def test_second_run_makes_no_judge_call_for_scored_work_and_retries_failed(run, db, judge_server):
    rows = [scripted_trace(i)[0] for i in range(20)]
    rows.append({"id": "tr-flaky", "output": "Fine answer. [judge-fail:garbage]"})
    insert_traces(db, rows)
    run()
    first = results(db)
    assert first[("tr-flaky", "toxicity")]["status"] == "failed"
    assert first[("tr-flaky", "toxicity")]["error_kind"] == "invalid_reply"
    assert "Sure!" in first[("tr-flaky", "toxicity")]["details"]["raw_reply"]

    judge_server.reset()
    judge_server.responder = _healing_responder
    summary = run()

    outputs = {req.data["output"] for req in judge_server.requests if req.data and "output" in req.data}
    assert outputs == {"Fine answer. [judge-fail:garbage]"}  # only the failed trace went back to the judge
    second = results(db)
    assert second[("tr-flaky", "toxicity")]["status"] == "scored"
    assert second[("tr-flaky", "toxicity")]["attempts"] == 2
    assert summary.scored == 2 and summary.traces == 1
    assert {k: v["scored_at"] for k, v in second.items() if k[0] != "tr-flaky"} == {
        k: v["scored_at"] for k, v in first.items() if k[0] != "tr-flaky"
    }


def _healing_responder(req):
    """The judge has recovered: answers as if the failure marker were absent
    (on a copy, so the recorded request keeps what was really sent)."""
    import dataclasses

    from tests.support.judge_server import rule_responder

    data = dict(req.data or {})
    if "output" in data:
        data["output"] = data["output"].replace("[judge-fail:garbage]", "")
    if "opinions" in data:
        data["opinions"] = [o.replace("[judge-fail:garbage]", "") for o in data["opinions"]]
    return rule_responder(dataclasses.replace(req, data=data))


def test_bad_rows_get_a_defined_result_or_a_clear_failure(run, db, judge_server):
    insert_traces(
        db,
        [
            {"id": "null-output", "output": None},
            {"id": "empty-output", "output": "   "},
            {"id": "object-context", "output": "Paris is the capital.", "context": {"not": "a list"}},
            {"id": "huge-output", "output": "Nice plan. " * 100_000, "context": ["plans"]},
        ],
    )
    run()
    stored = results(db)
    for metric in ("toxicity", "hallucination"):
        null = stored[("null-output", metric)]
        assert null["status"] == "failed" and null["error_kind"] == "invalid_trace"
        assert "null" in null["error"]
        empty = stored[("empty-output", metric)]
        assert empty["status"] == "scored" and empty["score"] == 0.0 and empty["judge_calls"] == 0
        huge = stored[("huge-output", metric)]
        assert huge["status"] == "scored"
        assert huge["details"]["truncated"]["output"] == len("Nice plan. " * 100_000)
    bad_context = stored[("object-context", "hallucination")]
    assert bad_context["status"] == "failed" and bad_context["error_kind"] == "invalid_trace"
    assert "context" in bad_context["error"]
    assert stored[("object-context", "toxicity")]["status"] == "scored"  # toxicity ignores context
    # the judge never saw more than the truncation budget
    longest = max(len(r.data.get("output") or "") for r in judge_server.requests if r.data)
    assert longest <= 20_000


def test_limit_since_until_and_sampling_select_the_right_traces(run, db, judge_server):
    from datetime import timedelta

    from tests.support.traces import BASE_TIME

    rows = [scripted_trace(i)[0] for i in range(40)]
    insert_traces(db, rows)
    run(limit=5)
    assert {tid for tid, _ in results(db)} == {f"tr-{i:04d}" for i in range(5)}  # oldest first

    run(since=BASE_TIME + timedelta(minutes=30), until=BASE_TIME + timedelta(minutes=35))
    assert {tid for tid, _ in results(db)} == {f"tr-{i:04d}" for i in [*range(5), *range(30, 35)]}

    run(sample_rate=0.5)
    sampled = {tid for tid, _ in results(db)} - {f"tr-{i:04d}" for i in [*range(5), *range(30, 35)]}
    assert 5 < len(sampled) < 25  # about half of the remaining 30
    before = set(results(db))
    run(sample_rate=0.5)  # deterministic: the same sample, nothing new
    assert set(results(db)) == before


def test_run_publishes_summary_and_progress_artifacts(run, db, judge_server, prefect_server):
    import asyncio

    from prefect.client.orchestration import get_client

    insert_traces(db, [scripted_trace(i)[0] for i in range(6)])
    summary = run()

    async def artifacts(key):
        # the raw filter endpoint: 3.8.8's client helper sends nulls the server rejects
        async with get_client() as client:
            response = await client._client.post(
                "/artifacts/filter",
                json={
                    "artifacts": {"key": {"any_": [key]}, "flow_run_id": {"any_": [summary.flow_run_id]}},
                    "sort": "CREATED_DESC",
                },
            )
            response.raise_for_status()
            return response.json()

    table = asyncio.run(artifacts("judgeflow-run-summary"))
    progress = asyncio.run(artifacts("judgeflow-run-progress"))
    report = asyncio.run(artifacts("judgeflow-run-report"))
    assert table and table[0]["type"] == "table"
    assert {"figure": "judge calls", "value": summary.judge_calls} in json.loads(table[0]["data"])
    assert progress and progress[0]["type"] == "progress" and float(progress[0]["data"]) == 100.0
    assert report and "scores written | 12" in report[0]["data"]


def test_a_default_run_writes_the_task_runs_the_readme_states_and_each_trace_is_findable(run, db, judge_server):
    """docs/running.md, "Fan-out": the default fan-out writes two task runs per
    claimed batch of up to 100 (trace, metric) pairs (claim-traces and
    score-batch), one more claim-traces that finds nothing left, and once per
    run ensure-schema, plan-source-reads, count-pending-work, count-unusable-rows, start-judge,
    record-judge-epochs, count-pairs-left-to-other-runs, advance-watermark, publish-run-summary,
    publish-trend, plus evaluate-alert-rules when alerts are evaluated. Each trace id finds its
    batch by the search of the run page's Task Runs tab (a task-run name
    substring match, as the UI asks the API) and is in that batch's artifact."""
    from prefect.client.orchestration import get_client

    from judgeflow.demo.run import wait_for_prefect_records

    rows = [scripted_trace(i)[0] for i in range(120)]  # 240 pairs: batches of 100, 100, 40
    insert_traces(db, rows)
    summary = run(evaluate_alerts=True)
    assert summary.scored + summary.skipped == 240
    assert wait_for_prefect_records(summary.flow_run_id)

    flow_filter = {"flow_runs": {"id": {"any_": [summary.flow_run_id]}}}
    with get_client(sync_client=True) as client:
        task_runs = client.request("POST", "/task_runs/filter", json={**flow_filter, "limit": 200}).json()
        names = collections.Counter(re.sub(r"(-[0-9a-f]{3}|: .*)$", "", t["name"]) for t in task_runs)
        assert names == {"claim-traces": 4, "score-batch": 3, "ensure-schema": 1, "count-pending-work": 1,
                         "count-unusable-rows": 1, "start-judge": 1, "record-judge-epochs": 1,
                         "count-pairs-left-to-other-runs": 1,
                         "publish-run-summary": 1, "publish-trend": 1, "evaluate-alert-rules": 1,
                         "plan-source-reads": 1, "advance-watermark": 1, "find-quiet-sessions": 1}
        assert len(task_runs) == 2 * 3 + 13  # 0.15 per trace here; 0.04 per trace at 100k traces

        batch_ids = {t["id"] for t in task_runs if t["name"].startswith("score-batch")}
        artifacts = client.request(
            "POST", "/artifacts/filter", json={"artifacts": {"task_run_id": {"any_": sorted(batch_ids)}}, "limit": 50}
        ).json()
        in_artifacts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for artifact in artifacts:
            data = artifact["data"] if isinstance(artifact["data"], list) else json.loads(artifact["data"])
            in_artifacts[artifact["task_run_id"]].update(row["trace_id"] for row in data)
        for row in rows[::7]:
            # the run page's Task Runs tab, with the trace id typed into its search box
            found = client.request("POST", "/task_runs/filter", json={
                "task_runs": {"flow_run_id": {"any_": [summary.flow_run_id]}, "name": {"like_": row["id"]}},
            }).json()
            # tr-0001 is also a substring of tr-00010 ...: the batch is the one whose name has the id as a word
            [batch] = [t for t in found if row["id"] in t["name"].split()]
            assert batch["id"] in batch_ids
            assert in_artifacts[batch["id"]][row["id"]] == 2  # a row per metric
