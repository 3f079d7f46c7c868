"""Judge spend under control (issue 15), through the real scoring flow: real
PostgreSQL, real Prefect, litellm over HTTP to the local judge server."""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from judgeflow.flows.scoring import score_new_traces
from judgeflow.judge.spend import attempt_estimate
from tests.support.traces import insert_traces, results


@pytest.fixture
def run(prefect_server, judgeflow_env):
    def _run(**params):
        params.setdefault("evaluate_alerts", False)
        return score_new_traces(**params)

    return _run


def test_a_settle_delay_leaves_a_young_trace_for_later(run, db, monkeypatch):
    now = datetime.now(timezone.utc)
    insert_traces(db, [
        {"id": "young", "created_at": now - timedelta(minutes=1), "output": "Fact: just written."},
        {"id": "settled", "created_at": now - timedelta(minutes=10), "output": "Fact: written a while ago."},
    ])
    monkeypatch.setenv("JUDGEFLOW_SETTLE_DELAY", "5m")

    summary = run()

    assert {trace for trace, _ in results(db)} == {"settled"}
    assert summary.scored == 2 and summary.pending_at_start == 2
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0

    # `judgeflow score`'s default is no delay; a run parameter overrides the setting
    run(settle_delay="0s")
    assert {trace for trace, _ in results(db)} == {"settled", "young"}


def _read_events(name: str, resource_id: str, timeout: float = 60.0):
    import time

    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            page = client.read_events(
                EventFilter(event=EventNameFilter(name=[name]), resource=EventResourceFilter(id=[resource_id])),
                limit=50,
            )
            if page.events:
                return page.events
            time.sleep(0.25)
    return []


def test_a_budget_stops_claiming_and_a_second_run_finishes(run, db, judge_server, monkeypatch):
    from judgeflow.tasks.reporting import BUDGET_EXHAUSTED_EVENT
    from tests.support.traces import first_step_calls, scripted_trace

    # a model litellm prices ($0.15 / $0.60 per million tokens), served by the local judge server
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/gpt-4o-mini")
    insert_traces(db, [scripted_trace(i)[0] for i in range(40)])
    budget = 0.004  # about a third of what the 80 pairs cost

    summary = run(budget_usd=budget, batch_size=20, max_concurrency=4)

    stored = results(db)
    assert 0 < len(stored) < 80
    assert all(r["status"] == "scored" and r["cost_usd"] > 0 for r in stored.values())
    spent = sum(r["cost_usd"] for r in stored.values())
    assert spent <= budget * 1.1  # admitted on estimates; what ran cost about what was reserved
    assert summary.budget_exhausted and summary.budget_usd == budget
    assert summary.budget_spent_usd == pytest.approx(spent, abs=1e-6)  # rounded to 6 places
    assert summary.left_pending == 80 - len(stored)  # nothing claimed and forgotten
    assert "Budget exhausted" in summary.markdown() and f"{80 - len(stored)} (trace, metric) pairs left pending" in (
        summary.markdown())
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0
    [event] = _read_events(BUDGET_EXHAUSTED_EVENT, f"prefect.flow-run.{summary.flow_run_id}")
    assert event.payload["left_pending"] == summary.left_pending

    second = run()

    assert len(results(db)) == 80 and second.scored == 80 - len(stored)
    assert not second.budget_exhausted and second.budget_usd is None
    assert set(first_step_calls(judge_server).values()) == {1}  # no pair judged twice


def test_one_claim_larger_than_the_budget_is_billed_to_the_budget_at_the_judge_server(run, db, judge_server,
                                                                                     monkeypatch):
    from judgeflow.judge.pricing import Prices
    from judgeflow.model import TraceWork
    from judgeflow.run.budget import RunBudget
    from tests.support.traces import scripted_trace

    judge_server.prices_per_mtok = (100.0, 200.0)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", "100")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", "200")
    traces = [scripted_trace(i)[0] for i in range(40)]
    insert_traces(db, traces)
    estimator = RunBudget(1.0, Prices(input_per_mtok=100.0, output_per_mtok=200.0, source="test"))
    estimated = sum(estimator.estimate(TraceWork(trace_id=t["id"], metric=m, created_at=t["created_at"],
                                                 input=t["input"], output=t["output"], context=t["context"]))[0]
                    for t in traces for m in ("toxicity", "hallucination"))
    budget = 0.3 * estimated

    # one claim holds every pair: its estimates alone pass the budget
    summary = run(budget_usd=budget, batch_size=400, max_concurrency=4)

    assert summary.budget_exhausted and summary.left_pending > 0  # work was left
    # spent on what the judge server billed, to the pair: at least 0.95x, at most the in-flight bound
    assert 0.95 * budget <= judge_server.billed_usd, (judge_server.billed_usd, budget)
    assert summary.budget_spent_usd == pytest.approx(judge_server.billed_usd, rel=0.1)


def test_a_budget_is_refused_without_a_price(judgeflow_env, db):
    from typer.testing import CliRunner

    from judgeflow.cli import app

    result = CliRunner().invoke(app, ["score", "--budget-usd", "1"])
    assert result.exit_code == 2
    assert "no price for judge model 'openai/judge-test'" in result.output
    assert "JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK" in result.output


CANNED = "Thanks for reaching out! Our team will get back to you within one business day."


def test_identical_traces_are_judged_once_and_every_copy_has_its_row(run, db, judge_server):
    from tests.support.traces import BASE_TIME, scripted_trace

    copies = [{"id": f"copy-{i:02d}", "created_at": BASE_TIME + timedelta(seconds=i), "input": "hello",
               "output": CANNED, "context": ["canned replies"]} for i in range(50)]
    unique = [scripted_trace(i)[0] for i in range(50)]
    insert_traces(db, copies + unique)

    summary = run(batch_size=20, max_concurrency=6)

    stored = results(db)
    assert len(stored) == 200 and all(r["status"] == "scored" for r in stored.values())
    # 51 traces' worth of judge calls: per metric, the canned text once plus the 50 unique outputs
    outputs = [req.data.get("output") for req in judge_server.requests
               if req.data and req.step in ("Opinions", "HallucinationJudgement")]
    assert outputs.count(CANNED) == 2  # one toxicity, one hallucination judgement
    assert len(outputs) == 2 * 51
    assert judge_server.calls() == sum(r["judge_calls"] for r in stored.values())
    for metric in ("toxicity", "hallucination"):
        rows = [stored[(c["id"], metric)] for c in copies]
        [original] = [r for r in rows if "reused_from" not in r["details"]]
        reused = [r for r in rows if "reused_from" in r["details"]]
        assert len(reused) == 49
        for r in reused:
            assert r["details"]["reused_from"] == original["trace_id"]
            assert (r["score"], r["passed"], r["reason"]) == (original["score"], original["passed"], original["reason"])
            assert r["judge_calls"] == 0 and r["cost_usd"] == 0 and r["prompt_tokens"] == 0
            assert r["content_hash"] == original["content_hash"]
    assert summary.reused == 98 and summary.scored == 200


def test_a_later_run_reuses_a_stored_result_through_the_index(run, db, judge_server, monkeypatch):
    insert_traces(db, [{"id": "first", "output": CANNED, "context": ["x"]}])
    run()
    judge_server.reset()
    insert_traces(db, [{"id": "second", "output": CANNED, "context": ["x"]},
                       {"id": "other-context", "output": CANNED, "context": ["y"]}])

    summary = run()

    stored = results(db)
    assert stored[("second", "toxicity")]["details"]["reused_from"] == "first"
    assert stored[("second", "hallucination")]["details"]["reused_from"] == "first"
    # a different context is different content: judged (hallucination) -- toxicity ignores context but
    # the hash covers the whole trace, so it is judged too
    assert "reused_from" not in stored[("other-context", "hallucination")]["details"]
    assert judge_server.calls("HallucinationJudgement") == 1
    assert summary.reused == 2
    with db.connect() as conn:
        conn.execute(sa.text("SET enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(sa.text(
            "EXPLAIN SELECT trace_id FROM judgeflow.eval_results WHERE content_hash = ANY(CAST(:h AS text[])) "
            "AND status IN ('scored', 'skipped')"), {"h": ["abc"]}))
    assert "eval_results_content_hash_idx" in plan

    # turned off: identical content is judged again
    monkeypatch.setenv("JUDGEFLOW_REUSE_IDENTICAL", "false")
    insert_traces(db, [{"id": "third", "output": CANNED, "context": ["x"]}])
    judge_server.reset()
    run()
    assert judge_server.calls("HallucinationJudgement") == 1
    assert "reused_from" not in results(db)[("third", "hallucination")]["details"]


def test_a_rescore_judges_identical_content_again_once(run, db, judge_server):
    from judgeflow.flows.backfill import backfill_traces
    from tests.support.traces import BASE_TIME

    insert_traces(db, [{"id": "a", "output": CANNED, "context": ["x"]}, {"id": "b", "output": CANNED, "context": ["x"]}])
    run()
    judge_server.reset()

    backfill_traces(since=BASE_TIME - timedelta(days=1), until=datetime.now(timezone.utc), rescore=True)

    # the old results are not reused by the re-scoring run; the two identical traces still cost one judgement
    assert judge_server.calls("HallucinationJudgement") == 1
    stored = results(db)
    assert sorted("reused_from" in stored[(t, "hallucination")]["details"] for t in ("a", "b")) == [False, True]


# --- every billed attempt counts (issue 29) --------------------------------------

IN_PER_MTOK, OUT_PER_MTOK = 100.0, 200.0  # the judge's price, as the settings give it
_MARK = re.compile(r"tr(\d+)x")


def _as_request(req):
    from pydantic import BaseModel

    from judgeflow.judge.base import JudgeRequest

    return JudgeRequest(step=str(req.step), messages=req.messages, response_format=BaseModel)


class BilledJudge:
    """The local judge server's rule-based judge, whose toxicity verdicts step (a
    metric's second step) fails once per trace with a 500: the pair is retried and
    its first step billed again. Records what every answered call costs, as the
    server's reported usage and the configured price make it."""

    def __init__(self):
        self.billed: list[tuple[str, str, float, int, int]] = []  # (trace, step, usd, prompt, completion)
        self.estimated: list[tuple[str, float]] = []  # (trace, usd): the 500s, counted at their estimate
        self._failed: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, req):
        from tests.support.judge_server import _text_of, error_reply, estimate_tokens, rule_responder

        trace = "tr" + _MARK.search(json.dumps(req.data)).group(1) + "x"
        with self._lock:
            if req.step == "Verdicts" and trace not in self._failed:
                self._failed.add(trace)
                # a 5xx after the request was sent counts at the attempt's estimate (judgeflow/judge/spend.py)
                self.estimated.append((trace, attempt_estimate((IN_PER_MTOK, OUT_PER_MTOK), _as_request(req))))
                return error_reply(500, "scripted: the second step fails once")
        reply = rule_responder(req)
        if reply.status == 200:
            prompt = estimate_tokens("".join(_text_of(m.get("content")) for m in req.messages if isinstance(m, dict)))
            completion = estimate_tokens(reply.content or "")
            usd = (prompt * IN_PER_MTOK + completion * OUT_PER_MTOK) / 1_000_000
            with self._lock:
                self.billed.append((trace, req.step, usd, prompt, completion))
        return reply

    def total(self, trace: str | None = None) -> float:
        return sum(usd for t, _, usd, _, _ in self.billed if trace is None or t == trace)

    def counted(self, trace: str | None = None) -> float:
        """What judgeflow must record: every answered call plus the 500s' estimates."""
        return self.total(trace) + sum(usd for t, usd in self.estimated if trace is None or t == trace)

    def calls(self, trace: str) -> list[str]:
        return [step for t, step, *_ in self.billed if t == trace]


def _priced_retrying_judge(judge_server, monkeypatch) -> BilledJudge:
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", str(IN_PER_MTOK))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", str(OUT_PER_MTOK))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MAX_RETRIES", "0")  # the 500 reaches the metric: the pair is retried
    billed = BilledJudge()
    judge_server.responder = billed
    return billed


def _traces(n: int) -> list[dict]:
    return [{"id": f"tr{i}x", "output": f"Trace tr{i}x is on its way. You tr{i}x are clueless [toxic]."}
            for i in range(n)]


def test_every_billed_attempt_counts_in_cost_and_budget(run, db, judge_server, monkeypatch):
    billed = _priced_retrying_judge(judge_server, monkeypatch)
    insert_traces(db, _traces(4))

    summary = run(budget_usd=100.0, metrics=["toxicity"], max_concurrency=2)

    stored = results(db)
    assert summary.scored == 4 and all(r["status"] == "scored" for r in stored.values())
    for (trace, _), row in stored.items():
        # the retry ran the whole metric again: opinions twice, then verdicts and reason
        assert sorted(billed.calls(trace)) == ["Opinions", "Opinions", "ToxicityReason", "Verdicts"]
        assert row["attempts"] == 2
        assert row["prompt_tokens"] == sum(p for t, _, _, p, _ in billed.billed if t == trace)
        assert row["completion_tokens"] == sum(c for t, _, _, _, c in billed.billed if t == trace)
        assert row["judge_calls"] == 5  # the 500 was sent: it is a call the provider may bill
        assert row["cost_usd"] == pytest.approx(billed.counted(trace), rel=1e-9)
    # the run's budget saw every billed call too
    assert summary.budget_spent_usd == pytest.approx(billed.counted(), abs=1e-6)


def test_a_budget_holds_with_retries_to_the_documented_bound(run, db, judge_server, monkeypatch):
    """max_concurrency 1 (one call in flight, one queued ahead): the spend may pass
    the budget by at most one attempt of each of the pairs holding a judge slot
    when it ran out, each call tried judge_max_retries + 1 (here 1) times (docs/running.md)."""
    billed = _priced_retrying_judge(judge_server, monkeypatch)
    insert_traces(db, _traces(10))
    budget = 0.8  # about a third of what the ten pairs cost with their retries

    # one pair per batch: the run reserves estimates for a few pairs at a time, not for all ten
    summary = run(budget_usd=budget, metrics=["toxicity"], max_concurrency=1, batch_size=1)

    stored = results(db)
    assert summary.budget_exhausted and 0 < len(stored) < 10, (billed.billed, summary.budget_spent_usd)
    # every billed call counted: the stored rows' costs plus what deferred pairs billed
    assert summary.budget_spent_usd == pytest.approx(billed.counted(), abs=1e-6)
    assert sum(r["cost_usd"] for r in stored.values()) == pytest.approx(
        sum(billed.counted(trace) for trace, _ in stored), rel=1e-9
    )
    # one attempt of a pair: opinions, verdicts, reason (the costliest pair's)
    one_attempt = max(
        sum(usd for t, step, usd, *_ in billed.billed if t == trace and step != "Opinions")
        + max(usd for t, step, usd, *_ in billed.billed if t == trace and step == "Opinions")
        for trace in {t for t, *_ in billed.billed}
    )
    slots = 1 + 1  # pairs started: the call on the wire, and the one prepared behind it (docs/running.md)
    assert billed.counted() <= budget + slots * one_attempt
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0
    assert summary.left_pending == 10 - len(stored)
