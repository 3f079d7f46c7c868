"""A night never bills past its sample budget (issue 46), through the real
scoring flow: real PostgreSQL, real Prefect, litellm over HTTP to the local
judge server, which prices every request it answers; its bill is the truth."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from judgeflow.flows.scoring import score_new_traces
from judgeflow.judge.config import JudgeConfig
from judgeflow.sampling.selection import select_below
from tests.support.traces import insert_traces, results

PRICES = (100.0, 200.0)  # USD per million prompt / completion tokens: the server's and judgeflow's
CONCURRENCY = 4
LONG_TEXT = " ".join(f"Sentence {k} of a long answer about shipping and refunds." for k in range(190))  # ~11k chars


@pytest.fixture
def priced(judge_server, judgeflow_env, monkeypatch):
    judge_server.prices_per_mtok = PRICES
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", str(PRICES[0]))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", str(PRICES[1]))
    monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "10")
    return judge_server


def _traces(prefix: str, n: int, app: str, age: timedelta) -> list[dict]:
    now = datetime.now(timezone.utc)
    text = LONG_TEXT if app == "long" else "Fine."
    return [{"id": f"{prefix}-{i:04d}", "created_at": now - age + timedelta(seconds=i), "input": f"question {i}",
             "output": f"Answer {i}. {text}", "metadata": {"app": app}} for i in range(n)]


def _full_cost() -> float:
    from judgeflow.config.settings import load_settings
    from judgeflow.metrics.registry import metric_names
    from judgeflow.tasks.claims import plan_source_reads
    from judgeflow.tasks.sampling import night_plan

    settings = load_settings()
    plan = plan_source_reads.fn(settings, list(metric_names()))
    return night_plan(settings, plan, list(metric_names()), since=None, until=None, sample_rate=1.0, record=False,
                      flow_run_id=None).full_cost_usd


def _overrun_bound(server) -> float:
    """docs/running.md: the pairs started when the budget is reached, each at
    most every attempt of its costliest chain (toxicity's three calls)."""
    one_call = max(server.bill_of(req) for req in server.requests)
    started = JudgeConfig("any", max_concurrency=CONCURRENCY, processes=1).dispatch_bound()
    return started * 3 * one_call


def _query(db, sql: str, **params):
    with db.connect() as conn:
        return conn.execute(sa.text(sql), params).all()


def test_the_night_bills_within_its_budget_across_runs_with_long_traces_and_late_ones(
        prefect_server, db, priced):
    # history: 40 short traces judged in full, so app=short has its own recent cost per metric
    insert_traces(db, _traces("hist", 40, "short", timedelta(hours=5)))
    score_new_traces(evaluate_alerts=False)
    before = priced.billed_usd
    # then 100 short and 100 long (~11k characters, about four times dearer) traces arrive
    insert_traces(db, _traces("s", 100, "short", timedelta(hours=3)) + _traces("l", 100, "long", timedelta(hours=3)))
    budget = 0.25 * _full_cost()

    first = score_new_traces(evaluate_alerts=False, sample_budget_usd=budget, max_concurrency=CONCURRENCY)

    night_bill = priced.billed_usd - before
    bound = _overrun_bound(priced)
    assert 0.5 * budget <= night_bill <= budget + bound, (night_bill, budget, bound)
    assert bound < 0.5 * budget  # the bound is a bound, not the budget again
    # the ledger holds what the run billed, every attempt
    (ledger,) = _query(db, "SELECT spent_usd, budget_usd FROM judgeflow.sample_ledger")
    assert ledger.budget_usd == pytest.approx(budget)
    assert 0.9 * night_bill <= ledger.spent_usd <= 1.25 * night_bill
    assert first.budget_usd == pytest.approx(budget)
    # the long stratum is priced on its own, dearer, and the split is Neyman's divided by sqrt(cost):
    # n_h ~ N_h S_h / sqrt(c_h), S from the stratum's history (none for app=long: 0.5)
    strata = {r.stratum: r for r in _query(db, "SELECT * FROM judgeflow.sample_strata")}
    c_long, c_short = strata["app=long"].cost_per_trace, strata["app=short"].cost_per_trace
    assert c_long > 3 * c_short
    (rate,) = _query(db, "SELECT avg(r) FROM (SELECT avg(CASE WHEN passed THEN 0.0 ELSE 1.0 END) AS r "
                         "FROM judgeflow.eval_results WHERE trace_id LIKE 'hist-%' GROUP BY metric) m")
    p = min(max(float(rate[0]), 0.01), 0.99)  # the metrics' mean history rate, kept off the edges as the plan does
    expected = (0.5 / c_long**0.5) / ((p * (1 - p)) ** 0.5 / c_short**0.5)
    got = strata["app=long"].inclusion_prob / strata["app=short"].inclusion_prob
    assert got == pytest.approx(expected, rel=0.15), (got, expected)

    # late traffic of the same strata, and a second run the same night: the night's budget holds
    late = _traces("late-s", 40, "short", timedelta(hours=1)) + _traces("late-l", 40, "long", timedelta(hours=1))
    insert_traces(db, late)
    second = score_new_traces(evaluate_alerts=False, sample_budget_usd=budget, max_concurrency=CONCURRENCY)
    night_bill = priced.billed_usd - before
    assert night_bill <= budget + _overrun_bound(priced), (night_bill, budget)
    assert second.budget_usd == pytest.approx(max(budget - ledger.spent_usd, 0.0))  # what the first run left
    spent = sum(r.spent_usd for r in _query(db, "SELECT spent_usd FROM judgeflow.sample_ledger"))
    assert 0.9 * night_bill <= spent <= 1.25 * night_bill
    # every late trace was decided, selected against its stratum's planned probability (none dropped)
    decided = {r.trace_id: r for r in _query(db, "SELECT * FROM judgeflow.sample_decisions WHERE trace_id LIKE 'late-%'")}
    assert set(decided) == {t["id"] for t in late}
    night = next(iter(decided.values())).night
    for app, prefix in (("short", "late-s"), ("long", "late-l")):
        ids = [t["id"] for t in late if t["id"].startswith(prefix + "-")]
        chosen = {t for t in ids if decided[t].selected}
        assert chosen == select_below(ids, strata[f"app={app}"].inclusion_prob, night)
    # what was judged is what was selected, and no trace was judged twice
    judged = {t for t, _ in results(db)}
    selected = {r.trace_id for r in _query(db, "SELECT trace_id FROM judgeflow.sample_decisions WHERE selected")}
    assert judged - {f"hist-{i:04d}" for i in range(40)} <= selected


def test_an_unknown_stratify_key_is_named_in_one_line(priced, db, monkeypatch):
    from typer.testing import CliRunner

    from judgeflow.cli import app

    monkeypatch.setenv("JUDGEFLOW_STRATIFY_BY", "app,tenant")
    insert_traces(db, _traces("s", 5, "short", timedelta(hours=2)))
    result = CliRunner().invoke(app, ["score", "--sample-budget-usd", "0.01", "--plan"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("judgeflow:")]
    assert len(lines) == 1 and "unknown metadata key(s) 'tenant'" in lines[0] and "keys seen: app" in lines[0]
    assert not priced.requests


@pytest.mark.parametrize("value", ["inf", "1e308", "0", "nan", "text", "-3"])
def test_a_bad_sample_budget_is_one_line_and_exit_2(priced, db, value):
    from typer.testing import CliRunner

    from judgeflow.cli import app

    result = CliRunner().invoke(app, ["score", "--sample-budget-usd", value])
    assert result.exit_code == 2, result.output
    out = result.output.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("judgeflow: JUDGEFLOW_SAMPLE_BUDGET_USD (--sample-budget-usd) must "), out
    assert repr(value) in out[0]
    assert not priced.requests
