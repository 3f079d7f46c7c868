"""Every attempt the provider bills is counted (issue 39.1): a judge that
stalls 30% of its requests past the judge timeout bills each request it
received, and the real scoring flow (real Prefect, litellm over HTTP, real
PostgreSQL) records about as much: in the result rows, the run summary and
the budget."""

from __future__ import annotations

import pytest

from judgeflow.flows.scoring import score_new_traces
from judgeflow.judge.config import JudgeConfig
from tests.support.traces import insert_traces, results

PRICES = (100.0, 200.0)  # USD per million prompt / completion tokens: the server's and judgeflow's


@pytest.fixture
def stalling_judge(judge_server, monkeypatch):
    """30% of requests never answered while the client waits (a stall outlasts the run);
    every request billed. Which attempts time out is the server's draw, not the machine's
    speed: the others are answered at once, with a timeout no loaded machine needs to
    reach for a local reply (at 0.5 s, a starved run timed answered calls out too and
    recorded them at their estimates: 130% of the bill)."""
    judge_server.fault_rates = {"stall": 0.3}
    judge_server.stall_s = 600.0  # woken when the server stops
    judge_server.prices_per_mtok = PRICES
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", str(PRICES[0]))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", str(PRICES[1]))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_TIMEOUT_S", "1.5")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MAX_RETRIES", "2")
    return judge_server


def _traces(n: int) -> list[dict]:
    return [{"id": f"st-{i:04d}", "input": f"question {i}",
             "output": f"Answer {i}: the parcel ships on day {i % 7}. Fact: shipping is free.",
             "context": [f"parcel {i} ships on day {i % 7}"]} for i in range(n)]


def test_recorded_spend_matches_what_a_stalling_judge_billed(prefect_server, judgeflow_env, db, stalling_judge):
    insert_traces(db, _traces(40))

    summary = score_new_traces(evaluate_alerts=False, budget_usd=100.0, max_concurrency=16, batch_size=20)

    stored = results(db)
    billed = stalling_judge.billed_usd
    stalled = stalling_judge.stats()["faults"].get("stall", 0)
    assert stalled > 10  # the server did stall
    # the stalled requests are still waiting at the server when the run ends; every other one was answered
    assert stalling_judge.in_flight == stalled
    assert stalling_judge.stats()["statuses"] == {"200": stalling_judge.calls() - stalled}
    assert billed > 0
    in_rows = sum(r["cost_usd"] or 0.0 for r in stored.values())
    for recorded in (in_rows, summary.cost_usd, summary.budget_spent_usd):
        assert 0.90 * billed <= recorded <= 1.25 * billed, (recorded, billed)
    # every request the server received is a counted call (a stalled one too)
    assert sum(r["judge_calls"] for r in stored.values()) == stalling_judge.calls()


def test_a_budget_overruns_by_at_most_its_documented_bound_at_64_in_flight(
    prefect_server, judgeflow_env, db, stalling_judge, monkeypatch
):
    """docs/running.md: spend <= budget + (pairs started) x (judge_max_retries
    + 1) x one attempt of the costliest pair, where with judge processes the
    pairs started are at most the calls the run hands its workers."""
    monkeypatch.setenv("JUDGEFLOW_TASK_RETRIES", "0")
    insert_traces(db, _traces(300))
    budget = 0.6  # a fraction of what the 300 pairs cost

    summary = score_new_traces(evaluate_alerts=False, budget_usd=budget, max_concurrency=64,
                               metrics=["hallucination"], batch_size=50, judge_processes=2)

    assert summary.budget_exhausted
    stored = results(db)
    assert 0 < len(stored) < 300
    # one attempt of the costliest pair: hallucination makes one call per pair
    per_request = [stalling_judge.bill_of(req) for req in stalling_judge.requests]
    one_attempt = max(per_request)
    started = JudgeConfig("any", max_concurrency=64, processes=2).dispatch_bound()
    bound = budget + started * (2 + 1) * one_attempt
    assert stalling_judge.billed_usd <= bound, (stalling_judge.billed_usd, bound)
    assert summary.budget_spent_usd <= bound
    # and what was recorded is what was billed, within the estimates' error
    assert 0.90 * stalling_judge.billed_usd <= summary.budget_spent_usd <= 1.25 * stalling_judge.billed_usd
