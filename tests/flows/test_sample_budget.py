"""The nightly sample budget (issue 40) through the real scoring flow: real
PostgreSQL, real Prefect, litellm over HTTP to the local judge server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from judgeflow.flows.scoring import score_new_traces
from judgeflow.sampling.selection import select
from tests.support.traces import insert_traces, results, scripted_trace

IN_PER_MTOK, OUT_PER_MTOK = 100.0, 200.0


@pytest.fixture
def run(prefect_server, judgeflow_env, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", str(IN_PER_MTOK))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", str(OUT_PER_MTOK))
    monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "10")

    def _run(**params):
        params.setdefault("evaluate_alerts", False)
        return score_new_traces(**params)

    return _run


def _traffic(db, *, big: int = 120, small: int = 8, bare: int = 5) -> dict[str, str]:
    """Recent traces: ``big`` of app=big, ``small`` of app=small, ``bare`` without the key; id -> stratum."""
    now = datetime.now(timezone.utc)
    rows, strata = [], {}
    for i in range(big + small + bare):
        row, _ = scripted_trace(i)
        stratum = "app=big" if i < big else "app=small" if i < big + small else "app=other"
        row.update(created_at=now - timedelta(hours=2, seconds=i),
                   metadata={"app": stratum.split("=")[1]} if stratum != "app=other" else {"team": "x"})
        rows.append(row)
        strata[row["id"]] = stratum
    insert_traces(db, rows)
    return strata


def _decisions(db) -> dict[str, sa.Row]:
    with db.connect() as conn:
        return {r.trace_id: r for r in conn.execute(sa.text("SELECT * FROM judgeflow.sample_decisions")).all()}


def _full_cost(settings_env) -> float:
    from judgeflow.config.settings import load_settings
    from judgeflow.tasks.claims import plan_source_reads
    from judgeflow.tasks.sampling import night_plan
    from judgeflow.metrics.registry import metric_names

    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for

    settings = load_settings()
    migrate.upgrade(engine_for(settings))
    plan = plan_source_reads.fn(settings, list(metric_names()))
    night = night_plan(settings, plan, list(metric_names()), since=None, until=None, sample_rate=1.0, record=False,
                       flow_run_id=None)
    assert not night.sampled and night.full_cost_usd > 0
    return night.full_cost_usd


def test_a_sample_budget_judges_minimums_then_neyman_and_records_the_rest(run, db, judgeflow_env, judge_server):
    strata = _traffic(db)
    full = _full_cost(judgeflow_env)
    budget = full * 0.3

    summary = run(sample_budget_usd=budget)

    decided = _decisions(db)
    assert set(decided) == set(strata)  # every new trace decided, none dropped (no app: 'other')
    assert {d.stratum for d in decided.values()} == {"app=big", "app=small", "app=other"}
    chosen = {t for t, d in decided.items() if d.selected}
    per = {s: sum(1 for t in chosen if strata[t] == s) for s in ("app=big", "app=small", "app=other")}
    # the small strata get all their traces (fewer than the minimum of 10), the big one at least the minimum
    assert per["app=small"] == 8 and per["app=other"] == 5 and 10 <= per["app=big"] < 120
    for t, d in decided.items():
        expected = 1.0 if strata[t] != "app=big" else per["app=big"] / 120
        assert d.inclusion_prob == pytest.approx(expected)
    # only the selected traces were judged, both metrics each; the spend fits the budget
    stored = results(db)
    assert {t for t, _ in stored} == chosen and len(stored) == 2 * len(chosen)
    assert sum(r["cost_usd"] for r in stored.values()) <= budget * 1.1
    assert summary.scored == 2 * len(chosen)
    assert any("recorded as not sampled" in n for n in summary.notes)
    # traces not sampled do not hold the watermark back: it moved to the newest trace
    with db.connect() as conn:
        marks = conn.execute(sa.text("SELECT scored_through FROM judgeflow.watermarks")).scalars().all()
        newest = conn.execute(sa.text("SELECT max(created_at) FROM public.llm_traces")).scalar_one()
    assert marks and all(m == newest for m in marks)
    # deterministic: the same night picks the same traces
    night = next(iter(decided.values())).night
    assert select([t for t, s in strata.items() if s == "app=big"], per["app=big"], night) == {
        t for t in chosen if strata[t] == "app=big"}

    # a second run judges nothing new: the traces not sampled are neither pending nor retried
    calls = len(judge_server.requests)
    second = run(sample_budget_usd=budget)
    assert second.scored == 0 and second.failed == 0 and len(judge_server.requests) == calls
    assert _decisions(db) == decided

    from judgeflow.status.work import work_status
    from judgeflow.config.settings import load_settings

    status = work_status(load_settings())
    assert status["not_sampled"] == len(strata) - len(chosen)
    assert all(m["pending"] == 0 for m in status["metrics"].values())
    # status's rate over the alert window is weighted: the judged results stand for every new trace
    tox = status["rates"]["toxicity"]
    assert tox["judged"] == len(chosen) and tox["traces"] == len(strata)
    assert tox["ci_low"] <= tox["rate"] <= tox["ci_high"]
    from typer.testing import CliRunner

    from judgeflow.cli import app

    printed = CliRunner().invoke(app, ["status"]).stdout
    assert f"{len(strata) - len(chosen):,} traces not sampled under the budget" in printed
    assert f"{len(chosen):,} judged of ~{len(strata):,} traces" in printed


def test_plan_prints_the_allocation_without_judging(judgeflow_env, db, judge_server, monkeypatch):
    from typer.testing import CliRunner

    from judgeflow.cli import app

    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", str(IN_PER_MTOK))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", str(OUT_PER_MTOK))
    monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "10")
    _traffic(db)
    result = CliRunner().invoke(app, ["score", "--sample-budget-usd", "0.0001", "--plan"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("stratum"))
    assert "traffic" in lines[header] and "smallest rise detected (80% power)" in lines[header]
    rows = {line.split()[0]: line.split() for line in lines[header + 1:header + 4]}
    assert set(rows) == {"app=big", "app=other", "app=small"}
    assert [rows[s][1] for s in ("app=big", "app=small", "app=other")] == ["120", "8", "5"]
    # the budget cannot pay for the minimums: the plan says which strata got fewer and why
    assert "fewer than the minimum" in result.output and "cannot pay for every stratum's minimum of 10" in (
        result.output)
    assert not judge_server.requests  # no judge call
    assert not _decisions(db)  # nothing recorded


def test_a_sample_budget_without_a_price_is_refused_before_any_call(judgeflow_env, db, judge_server):
    from typer.testing import CliRunner

    from judgeflow.cli import app

    _traffic(db, big=3, small=0, bare=0)
    result = CliRunner().invoke(app, ["score", "--sample-budget-usd", "1"])
    assert result.exit_code != 0
    assert "no price for judge model 'openai/judge-test'" in result.output
    assert not judge_server.requests


def test_a_run_short_of_the_minimums_says_so_and_a_backfill_judges_the_rest(run, db, judgeflow_env):
    from judgeflow.flows.backfill import backfill_traces

    strata = _traffic(db, big=30, small=12, bare=0)
    full = _full_cost(judgeflow_env)

    summary = run(sample_budget_usd=full * 0.3)  # ~12 traces: the minimums need 20

    short = [n for n in summary.notes if "fewer than the minimum" in n]
    assert short and all("cannot pay for every stratum's minimum of 10" in n for n in short)
    decided = _decisions(db)
    not_sampled = {t for t, d in decided.items() if not d.selected}
    assert not_sampled and not {t for t, _ in results(db)} & not_sampled

    # a backfill over the range judges the traces not sampled; they then count as judged and
    # the night's weights become 1 again (every trace judged)
    now = datetime.now(timezone.utc)
    backfill_traces(since=now - timedelta(days=1), until=now)
    assert {t for t, _ in results(db)} == set(strata)
    assert all(d.selected and d.inclusion_prob == 1.0 for d in _decisions(db).values())


def test_the_plan_gives_a_small_stratum_what_its_regression_rule_needs_and_names_the_one_it_could_not(
        judgeflow_env, db, judge_server, monkeypatch):
    """With a regression rule enabled and a week of history, the minimums come first, then the power each
    stratum needs to see the rule's minimum rise (cheapest first), then Neyman."""
    from typer.testing import CliRunner

    from judgeflow.cli import app
    from tests.alerts.helpers import add_results

    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", str(IN_PER_MTOK))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", str(OUT_PER_MTOK))
    monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "10")
    monkeypatch.setenv("JUDGEFLOW_TOXICITY_REGRESSION_MIN_INCREASE", "0.05")
    _traffic(db, big=200, small=40, bare=0)
    full = _full_cost(judgeflow_env)
    for app_ in ("big", "small"):  # a week's history: 2% failing in both apps
        add_results(db, passed=98, not_passed=2, segment={"app": app_}, age=timedelta(days=2))
    # ~70 of the 240 traces: both minimums (20) and all of small (30 more) fit, big's ~190 do not
    result = CliRunner().invoke(app, ["score", "--sample-budget-usd", f"{full * 70 / 240:.6f}", "--plan"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("stratum"))
    rows = {line.split()[0]: line.split() for line in lines[header + 1:header + 3]}
    assert rows["app=small"][1:3] == ["40", "40"]  # all of it: Neyman alone would give it about 12
    assert 10 <= int(rows["app=big"][2]) < 190
    assert "stratum app=big: " in result.output and "the sample budget left after the cheaper strata could not " \
        "pay for them" in result.output
    assert "stratum app=small: 40 of 40 judged: " in result.output and "the stratum has only 40 new traces, all " \
        "judged" in result.output
    assert not judge_server.requests and not _decisions(db)
