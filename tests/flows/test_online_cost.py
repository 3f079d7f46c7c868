"""What a batch run's night would have cost online (issue 49): the run summary
prices the usage each result recorded (prompt, cached and completion tokens)
at the online prices, whichever judge wrote the results. Real PostgreSQL, real
Prefect, litellm over HTTP to the local judge server."""

from __future__ import annotations

import pytest

from judgeflow.flows.scoring import score_new_traces
from judgeflow.judge.pricing import Prices
from judgeflow.model import ScoreOutcome
from judgeflow.tasks.reporting import SummaryBuilder
from tests.support.traces import insert_traces, results, scripted_trace

ONLINE = (2.0, 8.0)  # USD per million prompt / completion tokens
CACHED = 0.5  # USD per million cached prompt tokens


def _online_usd(row: dict) -> float:
    plain = row["prompt_tokens"] - row["cached_tokens"]
    return (plain * ONLINE[0] + row["cached_tokens"] * CACHED + row["completion_tokens"] * ONLINE[1]) / 1e6


def test_a_batch_runs_summary_says_what_the_night_would_have_cost_online(prefect_server, judgeflow_env, db,
                                                                         judge_server, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", str(ONLINE[0]))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", str(ONLINE[1]))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_CACHED_INPUT_COST_PER_MTOK", str(CACHED))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_BATCH", "true")
    # the judge server bills these prices and caches prompt prefixes from 256 tokens (the built-in prompts'
    # fixed parts are longer): cached tokens at a quarter of the input price, the configured cached price
    judge_server.prices_per_mtok, judge_server.cached_fraction = ONLINE, CACHED / ONLINE[0]
    judge_server.cache_min_tokens, judge_server.cache_block_tokens = 256, 64
    insert_traces(db, [scripted_trace(i)[0] for i in range(4)])

    summary = score_new_traces(evaluate_alerts=False)

    rows = list(results(db).values())
    assert len(rows) == 8 and all(r["status"] == "scored" and r["prompt_tokens"] > 0 for r in rows)
    assert all(0 <= r["cached_tokens"] < r["prompt_tokens"] for r in rows)
    assert sum(r["cached_tokens"] for r in rows) == judge_server.cached_tokens > 0
    assert summary.cached_tokens == sum(r["cached_tokens"] for r in rows)
    assert summary.prompt_tokens == sum(r["prompt_tokens"] for r in rows)
    online = sum(_online_usd(r) for r in rows)
    assert online > 0 and summary.online_cost_usd == pytest.approx(online, abs=1e-6)
    # billed at most the online price (the batch rate when the calls went through batches)
    assert summary.cost_usd is not None and summary.cost_usd <= summary.online_cost_usd + 1e-6
    assert summary.cost_usd == pytest.approx(judge_server.billed_usd, abs=1e-6)  # what the provider billed
    assert f"| cost online (USD, the same tokens at the online prices) | {online:.4f} |" in summary.markdown()
    assert f"| cached prompt tokens | {summary.cached_tokens} |" in summary.markdown()

    # an online run says nothing of the kind
    monkeypatch.setenv("JUDGEFLOW_JUDGE_BATCH", "false")
    insert_traces(db, [{**scripted_trace(4)[0], "id": "online-night"}])
    later = score_new_traces(evaluate_alerts=False)
    assert later.scored == 2 and later.online_cost_usd is None
    assert "cost online" not in later.markdown()


def test_the_online_cost_prices_each_metric_at_its_own_prices_and_cached_tokens_at_the_cached_rate():
    totals = SummaryBuilder()
    totals.add([
        ScoreOutcome(trace_id="a", metric="toxicity", status="scored", prompt_tokens=1000, completion_tokens=100,
                     cached_tokens=600),
        ScoreOutcome(trace_id="a", metric="hallucination", status="failed", prompt_tokens=400, completion_tokens=50),
        ScoreOutcome(trace_id="b", metric="toxicity", status="deferred", prompt_tokens=200, completion_tokens=0,
                     cached_tokens=200),
    ])
    own = Prices(10.0, 20.0, "own model")
    prices = Prices(2.0, 8.0, "run's", per_metric={"hallucination": own}, cached_input_per_mtok=0.5)
    expected = ((400 * 2.0 + 600 * 0.5 + 100 * 8.0) + (0 + 200 * 0.5) + (400 * 10.0 + 50 * 20.0)) / 1e6
    assert totals.cost_at(prices) == pytest.approx(expected)
    built = totals.build(duration_s=1.0, flow_run_id=None, pending_at_start=3)
    assert (built.prompt_tokens, built.cached_tokens, built.online_cost_usd) == (1600, 800, None)
