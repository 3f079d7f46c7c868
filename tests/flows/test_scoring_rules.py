"""The rules that keep a bad night cheap and harmless, each through the real
flow (real PostgreSQL, real Prefect, litellm over HTTP to the local judge)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.cli import app
from judgeflow.flows.backfill import backfill_traces
from judgeflow.flows.scoring import score_new_traces
from tests.support.traces import BASE_TIME, first_step_calls, insert_traces, results, scripted_trace

runner = CliRunner()


def test_a_rescore_during_a_judge_outage_keeps_every_previous_score(prefect_server, judgeflow_env, db, judge_server,
                                                                     monkeypatch):
    insert_traces(db, [scripted_trace(i)[0] for i in range(8)])
    score_new_traces(evaluate_alerts=False)
    before = results(db)
    assert {r["status"] for r in before.values()} == {"scored"}

    monkeypatch.setenv("JUDGEFLOW_JUDGE_MAX_RETRIES", "0")
    judge_server.fault_rates = {"500": 1.0}  # the judge is down
    summary = backfill_traces(since=BASE_TIME, until=BASE_TIME + timedelta(days=1), rescore=True)

    assert summary.failed == 16 and summary.scored == 0
    after = results(db)
    for key, old in before.items():
        new = after[key]
        assert (new["status"], new["score"], new["scored_at"]) == ("scored", old["score"], old["scored_at"])
        assert new["details"]["failed_rescores"] == 1
        assert new["details"]["last_failed_rescore"]["error_kind"] == "judge_unavailable"
    # the judge is back: the next re-score replaces them
    judge_server.fault_rates = {}
    summary = backfill_traces(since=BASE_TIME, until=BASE_TIME + timedelta(days=1), rescore=True)
    assert summary.scored == 16 and all(results(db)[k]["scored_at"] > before[k]["scored_at"] for k in before)


def test_a_poison_pair_is_given_up_after_max_runs_and_comes_back_with_retry_failed(
    prefect_server, judgeflow_env, db, judge_server, monkeypatch
):
    monkeypatch.setenv("JUDGEFLOW_MAX_RUNS_PER_PAIR", "2")
    monkeypatch.setenv("PREFECT_API_URL", prefect_server)  # the CLI uses the test's Prefect server
    monkeypatch.setenv("JUDGEFLOW_TASK_RETRIES", "0")
    insert_traces(db, [scripted_trace(0)[0], {"id": "poison", "output": "Always [judge-fail:400] this."}])

    def poison_calls() -> int:
        return sum(n for (output, _), n in first_step_calls(judge_server).items() if "judge-fail" in output)

    for run in (1, 2):
        score_new_traces(evaluate_alerts=False)
        assert results(db)[("poison", "toxicity")]["failed_runs"] == run
    assert poison_calls() == 4  # two runs, two metrics
    third = score_new_traces(evaluate_alerts=False)
    assert poison_calls() == 4 and third.failed == 0, "a given-up pair was retried"
    row = results(db)[("poison", "toxicity")]
    assert row["status"] == "failed" and row["error_kind"] == "judge_rejected" and row["attempts"] == 2

    status = runner.invoke(app, ["status", "--json"])
    assert status.exit_code == 0, status.output
    report = json.loads(status.output[status.output.index("{"):])
    for metric in ("toxicity", "hallucination"):
        assert report["metrics"][metric]["given_up"] == 1 and report["metrics"][metric]["failed"] == 1
        assert report["metrics"][metric]["pending"] == 0  # a given-up pair is not work for the next run
    assert "given up" in runner.invoke(app, ["status"]).output

    result = runner.invoke(app, ["score", "--no-alerts", "--retry-failed"])
    assert result.exit_code == 0, result.output
    assert poison_calls() == 6
    assert results(db)[("poison", "toxicity")]["failed_runs"] == 3
    # and the backfill retries them too
    backfill_traces(since=BASE_TIME - timedelta(days=1), until=BASE_TIME + timedelta(days=1))
    assert poison_calls() == 8


def test_a_trace_asking_for_500_opinions_costs_at_most_max_opinions_verdicts(prefect_server, judgeflow_env, db,
                                                                             judge_server, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_MAX_OPINIONS", "50")
    output = " ".join(f"Opinion {i} is mine [toxic]." if i % 5 == 0 else f"Opinion {i} is mine." for i in range(500))
    insert_traces(db, [{"id": "chatty", "output": output}])

    score_new_traces(evaluate_alerts=False, metrics=["toxicity"])

    verdict_requests = [r for r in judge_server.requests if r.step == "Verdicts"]
    assert sum(len(r.data["opinions"]) for r in verdict_requests) == 50
    assert len(verdict_requests) == 5  # batches of 10
    row = results(db)[("chatty", "toxicity")]
    assert row["status"] == "scored" and len(row["details"]["opinions"]) == 50
    assert row["details"]["opinions_dropped"]["extracted"] == 500
    assert row["score"] == 0.2  # 10 toxic of the 50 judged


def test_the_time_budget_ends_a_run_whose_judge_stalls(prefect_server, judgeflow_env, db, judge_server, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_JUDGE_TIMEOUT_S", "2")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MAX_RETRIES", "0")
    monkeypatch.setenv("JUDGEFLOW_MAX_RUN_DURATION", "5s")
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "1")
    judge_server.fault_rates = {"stall": 1.0}
    judge_server.stall_s = 120
    insert_traces(db, [scripted_trace(i)[0] for i in range(200)])

    started = time.monotonic()
    state = score_new_traces(batch_size=20, max_concurrency=4, return_state=True)
    elapsed = time.monotonic() - started

    # scoring everything against this judge takes >= 400 pairs x 3 attempts x 2 s / 4 = 600 s
    assert state.is_completed() and elapsed < 200, elapsed
    summary = state.result()
    assert any("time budget spent" in note for note in summary.notes)
    stored = results(db)
    assert len(stored) < 400 and all(r["status"] == "failed" for r in stored.values())
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0
        evaluated = conn.execute(sa.text("SELECT count(*) FROM judgeflow.alerts WHERE last_evaluated_at IS NOT NULL"))
        assert evaluated.scalar_one() >= 1, "the alert rules did not run"
    # what was not scored stays pending for the next run
    judge_server.fault_rates = {}
    monkeypatch.setenv("JUDGEFLOW_MAX_RUN_DURATION", "6h")
    score_new_traces(evaluate_alerts=False, max_concurrency=8)
    assert {r["status"] for r in results(db).values()} == {"scored"} and len(results(db)) == 400


def test_alerts_are_evaluated_when_scoring_fails_part_way_and_the_run_ends_failed(
    prefect_server, judgeflow_env, db, judge_server, monkeypatch
):
    import threading

    from tests.support.judge_server import rule_responder

    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "1")
    from datetime import datetime, timezone

    recent = datetime.now(timezone.utc) - timedelta(hours=2)  # inside the alert window
    insert_traces(db, [{**scripted_trace(i)[0], "created_at": recent + timedelta(minutes=i)} for i in range(60)])
    # mid-run the source goes away (say, a migration renamed it): the next
    # claim fails however often it is retried, an infrastructure fault
    gone = threading.Event()

    def responder(req):
        if len(judge_server.requests) >= 12 and not gone.is_set():
            gone.set()
            with db.begin() as conn:
                conn.exec_driver_sql("ALTER TABLE llm_traces RENAME TO llm_traces_old")
        return rule_responder(req)

    judge_server.responder = responder
    state = score_new_traces(batch_size=10, max_concurrency=4, evaluate_alerts=True, return_state=True)

    assert state.is_failed() and "does not exist" in state.message, state.message
    stored = results(db)
    scored_toxicity = sum(1 for (_, m), r in stored.items() if m == "toxicity" and r["status"] == "scored")
    assert 0 < len(stored) < 120 and scored_toxicity > 0
    with db.connect() as conn:
        alert = conn.execute(sa.text("SELECT * FROM judgeflow.alerts WHERE rule = 'toxicity_rate'")).mappings().one()
        claims = conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one()
    # evaluated after the work in flight was stored: it counts every score of the run
    assert alert["last_evaluated_at"] is not None and alert["sample_size"] == scored_toxicity
    assert claims == 0
