"""Metrics declared in JUDGEFLOW_METRICS_FILE are served like the built-ins,
through the real flow (PostgreSQL, Prefect, litellm over HTTP to the local
judge server answering G-Eval prompts): results with cost and tokens,
identical content judged once, generated steps written once and stored, the
version and its epochs, the alert rules, status, show, report, calibrate,
shadow, backfill --rescore, the run's artifacts, the offline judge; a metric
judged by a model of its own (`model`), priced at that model's price, its
epochs and reuse keyed on it, in the run's process and through the judge
workers."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.metrics.geval.metric import NO_RUBRIC
from judgeflow.metrics.registry import registered
from tests.support.traces import insert_traces

runner = CliRunner()

FILE = '''
[metrics.helpfulness]
criteria = "The reply helps the user with what they asked instead of refusing."
evaluation_steps = ["Read what the user asked.", "Decide whether the reply helps with it or refuses it."]
inputs = ["input", "output"]
threshold = 0.5
rate_max = 0.10
regression = true
segment_by = ["tier"]

[metrics.grounded]
criteria = "Every claim of the reply is supported by the context."
inputs = ["output", "context"]
model = "openai/gpt-4o"
regression = true
'''
RUN_MODEL = "openai/judge-test"  # JUDGEFLOW_JUDGE_MODEL of the suite's judgeflow_env
# helpfulness: 0.2 and 0.3 fail, the rest pass; t5 is t4 again (judged once)
OUTPUTS = ["I will not help with that. [geval=2]", "Ask someone else. [geval=3]", "Mostly: boil it. [geval=7]",
           "Sure, here is how.", "Boil it for 7 minutes.", "Boil it for 7 minutes."]


def _rows(db, sql: str, **params) -> list[dict]:
    with db.connect() as conn:
        return [dict(r) for r in conn.execute(sa.text(sql), params).mappings()]


def _cli(*args: str):
    from judgeflow.cli import app

    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def file_env(prefect_server, judgeflow_env, monkeypatch, tmp_path):
    from judgeflow.run.metric_door import open_metrics

    path = tmp_path / "metrics.toml"
    path.write_text(FILE, encoding="utf-8")
    monkeypatch.setenv("PREFECT_API_URL", prefect_server)
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(path))
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "4")
    monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", "1.0")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", "2.0")
    yield path
    open_metrics(None)
    assert list(registered()) == ["toxicity", "hallucination"]


def _first_night(db, judge_server):
    from judgeflow.flows.scoring import score_new_traces

    before = judge_server.calls("GEvalScore")
    recent = datetime.now(timezone.utc) - timedelta(minutes=5)
    insert_traces(db, [{"id": f"t{i}", "created_at": recent + timedelta(seconds=i), "input": "How do I boil an egg?",
                        "output": out, "context": ["Eggs boil in 7 minutes."],
                        "metadata": {"app": "ab"[i >= 2], "tier": ("free", "paid")[i >= 4], "user": f"u{i}"}}
                       for i, out in enumerate(OUTPUTS)])
    summary = score_new_traces()
    # four metrics, six traces; t5 copies t4's result for every metric
    assert (summary.scored, summary.failed, summary.reused) == (24, 0, 4)
    # 5 judged per file metric; the steps of `grounded` written once
    assert (judge_server.calls("GEvalScore") - before, judge_server.calls("GEvalSteps")) == (10, 1)
    return summary


def test_a_file_metric_is_served_like_the_built_ins(file_env, db, judge_server, monkeypatch):
    summary = _first_night(db, judge_server)
    helpfulness, grounded = registered()["helpfulness"], registered()["grounded"]
    rows = _rows(db, "SELECT trace_id, status, score, passed, reason, cost_usd, prompt_tokens, completion_tokens, "
                     "latency_ms, judge_calls, metric_version, details FROM judgeflow.eval_results "
                     "WHERE metric = 'helpfulness' ORDER BY trace_id")
    assert [(r["trace_id"], r["score"], r["passed"]) for r in rows] == [
        ("t0", 0.2, False), ("t1", 0.3, False), ("t2", 0.7, True), ("t3", 1.0, True), ("t4", 1.0, True),
        ("t5", 1.0, True)]
    judged, copy = rows[:5], rows[5]
    assert all(r["status"] == "scored" and r["judge_calls"] == 1 and r["cost_usd"] > 0 and r["prompt_tokens"] > 0
               and r["completion_tokens"] > 0 and r["latency_ms"] > 0 for r in judged)
    assert rows[0]["reason"] == "The reply carries the marker [geval=2]." and rows[0]["details"]["raw_score"] == 2
    assert (copy["judge_calls"], copy["cost_usd"], copy["details"]["reused_from"]) == (0, 0.0, "t4")
    assert {r["metric_version"] for r in rows} == {helpfulness.version}

    # the generated steps: stored, quoting the criteria, part of the version
    (stored,) = _rows(db, "SELECT metric, value FROM judgeflow.metric_steps")
    assert stored["metric"] == "grounded" and "supported by the context" in stored["value"][1]
    assert "pending" not in grounded.version
    assert {r["metric_version"] for r in _rows(db, "SELECT metric_version FROM judgeflow.eval_results "
                                                   "WHERE metric = 'grounded'")} == {grounded.version}
    epochs = {r["metric"]: r["metric_version"] for r in _rows(db, "SELECT metric, metric_version FROM "
                                                                  "judgeflow.judge_epochs")}
    assert (epochs["helpfulness"], epochs["grounded"]) == (helpfulness.version, grounded.version)
    assert any(n.startswith("grounded: its evaluation steps were written by the judge once") for n in summary.notes)
    assert summary.by_metric["helpfulness"]["scored"] == 6 and summary.pass_rate["helpfulness"] == pytest.approx(4 / 6)

    # its alert rule: 2 of 6 did not pass, over the 10% maximum; per value of its own segment key (tier), in place
    # of JUDGEFLOW_ALERT_SEGMENT_BY's app, which the other metrics' rules keep
    alerts = {(r["rule"], json.dumps(r["segment"])): r for r in _rows(
        db, "SELECT rule, segment, state, value, sample_size FROM judgeflow.alerts WHERE rule LIKE 'helpfulness%'")}
    overall = alerts[("helpfulness_rate", "{}")]
    assert (overall["state"], overall["sample_size"]) == ("firing", 6) and overall["value"] == pytest.approx(2 / 6)
    free, paid = alerts[("helpfulness_rate", '{"tier": "free"}')], alerts[("helpfulness_rate", '{"tier": "paid"}')]
    assert (free["state"], free["sample_size"], free["value"]) == ("firing", 4, pytest.approx(0.5))
    assert (paid["state"], paid["sample_size"]) == ("ok", 2)  # under the 4 samples a rule needs
    assert {segment for _, segment in alerts} == {"{}", '{"tier": "free"}', '{"tier": "paid"}'}
    _segments_of_the_other_rules_and_the_rollup(db)

    # the run's artifacts: its batch table names the metric's pairs
    table = asyncio.run(_artifacts(summary.flow_run_id))
    assert {"figure": "judge calls", "value": summary.judge_calls} in table

    status = json.loads((out := _cli("status", "--json"))[out.index("{"):])
    assert status["metrics"]["helpfulness"] | {} == {**status["metrics"]["helpfulness"], "scored": 6, "passed": 4,
                                                     "pending": 0, "failed": 0}
    assert "helpfulness: score 0.200, FAILED (threshold 0.5)" in _cli("show", "t0")
    report = _cli("report", "--since", "1d")
    assert any(line.lstrip().startswith("helpfulness") for line in report.splitlines()), report
    # its trend lines are per its own key, the built-ins' per app
    window = json.loads((out := _cli("report", "--since", "1d", "--json"))[out.index("{"):])["window"]
    lines = {(w["metric"], json.dumps(w["segment"], sort_keys=True), w["judged"]) for w in window
             if w["metric"] in ("helpfulness", "toxicity")}
    assert lines == {("helpfulness", "null", 6), ("helpfulness", '{"tier": "free"}', 4),
                     ("helpfulness", '{"tier": "paid"}', 2), ("toxicity", "null", 6),
                     ("toxicity", '{"app": "a"}', 2), ("toxicity", '{"app": "b"}', 4)}, lines
    listed = _cli("alerts")
    assert "helpfulness's rules by tier: their own segment_by" in listed
    assert any(line.startswith("helpfulness_rate") and "tier=free" in line and "FIRING" in line
               for line in listed.splitlines()), listed
    assert not any("helpfulness" in line and "app=" in line for line in listed.splitlines()), listed

    _grounded_is_judged_by_its_own_model(db, judge_server)
    assert "judged by: openai/judge-test (toxicity, hallucination, helpfulness); openai/gpt-4o (grounded)" in _cli(
        "status")
    assert "judge: openai/gpt-4o, metric version grounded/1+" in _cli("show", "t0")

    _stored_steps_are_not_written_again(db, judge_server, grounded.version)
    _editing_the_criteria_starts_an_epoch_and_pages_nothing(db, file_env)
    _changing_its_model_starts_its_epoch_only(db, file_env, judge_server, monkeypatch)
    _removed_from_the_file_its_results_stay(db, file_env)


def _segments_of_the_other_rules_and_the_rollup(db) -> None:
    """Every result stores the keys any served metric's rules need (app and tier; not user); the other metrics'
    rules are per app only; the rollup keeps one line per (key, value), never per combination, and every rule's
    figures from it equal those counted from the results alone."""
    from judgeflow.alerts.evaluation import read_evaluation_counts
    from judgeflow.alerts.rules import enabled_rules
    from judgeflow.config.settings import load_settings
    from judgeflow.db.rollup import differences
    from tests.alerts.raw_figures import raw_figures

    stored = _rows(db, "SELECT DISTINCT segment FROM judgeflow.eval_results WHERE trace_id IN ('t0', 't4')")
    assert sorted(json.dumps(r["segment"], sort_keys=True) for r in stored) == [
        '{"app": "a", "tier": "free"}', '{"app": "b", "tier": "paid"}']
    others = {(r["rule"], json.dumps(r["segment"])) for r in _rows(
        db, "SELECT rule, segment FROM judgeflow.alerts WHERE rule IN ('toxicity_rate', 'grounded_regression')")}
    assert others == {(rule, segment) for rule in ("toxicity_rate", "grounded_regression")
                      for segment in ("{}", '{"app": "a"}', '{"app": "b"}')}
    assert {r["seg_key"] for r in _rows(db, "SELECT DISTINCT seg_key FROM judgeflow.result_rollup")} == {
        "", "app", "tier"}
    rules = [r for r in enabled_rules(load_settings()) if r.kind in ("not_passed_rate", "regression")]
    assert {r.name: r.segment_by for r in rules if r.metric in ("helpfulness", "toxicity")} == {
        "toxicity_rate": ("app",), "helpfulness_rate": ("tier",), "helpfulness_regression": ("tier",)}
    with db.connect() as conn:
        assert differences(conn) == []
        now = conn.execute(sa.text("SELECT now()")).scalar_one()
        counts = read_evaluation_counts(conn, rules, now=now)
        def seen(figures) -> list[tuple]:
            return [(f.segment.label, f.sample_size, f.violations, f.value, f.baseline_sample_size) for f in figures]

        mine = {(r.name, key): seen(counts.figures(r, key=key)) for r in rules for key in (None, *r.segment_by)}
        assert mine == {(r.name, key): seen(raw_figures(conn, r, now=now, key=key))
                        for r in rules for key in (None, *r.segment_by)}
        assert [f[:3] for f in mine[("helpfulness_rate", "tier")]] == [("tier=free", 4, 2), ("tier=paid", 2, 0)]


def _models_asked(judge_server, criteria: str) -> list[str]:
    """The model of each request the judge server received for the metric with ``criteria``, in order."""
    return [r.model for r in judge_server.requests
            if any(criteria in str(m.get("content")) for m in r.messages)]


def _grounded_is_judged_by_its_own_model(db, judge_server) -> None:
    """Its calls (its steps too) go to its model, on the run's endpoint; its results, steps and epoch name that
    model; its cost is that model's price in litellm's map, not the run judge's configured 1/2 USD per Mtok."""
    from judgeflow.judge.pricing import map_prices

    assert _models_asked(judge_server, "supported by the context") == ["gpt-4o"] * 6  # its steps, then 5 pairs
    assert set(_models_asked(judge_server, "instead of refusing")) == {"judge-test"}
    own = map_prices("openai/gpt-4o")
    assert own is not None and (own.input_per_mtok, own.output_per_mtok) != (1.0, 2.0)
    for metric, model, (per_in, per_out) in (("grounded", "openai/gpt-4o", (own.input_per_mtok, own.output_per_mtok)),
                                              ("helpfulness", RUN_MODEL, (1.0, 2.0))):
        rows = _rows(db, "SELECT judge_model, cost_usd, prompt_tokens, completion_tokens FROM judgeflow.eval_results "
                         "WHERE metric = :m AND judge_calls = 1", m=metric)
        assert len(rows) == 5 and {r["judge_model"] for r in rows} == {model}
        for r in rows:
            assert r["cost_usd"] == pytest.approx((r["prompt_tokens"] * per_in + r["completion_tokens"] * per_out) / 1e6)
    (steps,) = _rows(db, "SELECT judge_model FROM judgeflow.metric_steps WHERE metric = 'grounded'")
    assert steps["judge_model"] == "openai/gpt-4o"
    epochs = {r["metric"]: r["judge_model"] for r in _rows(db, "SELECT metric, judge_model FROM judgeflow.judge_epochs")}
    assert epochs == {"toxicity": RUN_MODEL, "hallucination": RUN_MODEL, "helpfulness": RUN_MODEL,
                      "grounded": "openai/gpt-4o"}


def _changing_its_model_starts_its_epoch_only(db, path: Path, judge_server, monkeypatch) -> None:
    """Through the judge worker processes: a new epoch for grounded alone, nothing paged; t7 (t6's content again)
    is copied for the metrics whose judge is unchanged and judged again by grounded's new model."""
    from judgeflow.judge.pricing import map_prices

    path.write_text(path.read_text(encoding="utf-8").replace('"openai/gpt-4o"', '"openai/gpt-4o-mini"'),
                    encoding="utf-8")
    before = {r["metric"]: r["n"] for r in _rows(db, "SELECT metric, count(*) AS n FROM judgeflow.judge_epochs "
                                                     "GROUP BY metric")}
    asked = len(judge_server.requests)
    insert_traces(db, [{"id": "t7", "created_at": datetime.now(timezone.utc) - timedelta(seconds=30),
                        "input": "Hi", "output": "Hello! [geval=1]", "metadata": {"app": "a"}}])  # t6's content
    monkeypatch.setenv("JUDGEFLOW_JUDGE_PROCESSES", "2")
    _cli("score")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_PROCESSES", "1")
    after = {r["metric"]: r["n"] for r in _rows(db, "SELECT metric, count(*) AS n FROM judgeflow.judge_epochs "
                                                    "GROUP BY metric")}
    assert after == {**before, "grounded": before["grounded"] + 1}
    (latest,) = _rows(db, "SELECT judge_model FROM judgeflow.judge_epochs WHERE metric = 'grounded' "
                          "ORDER BY id DESC LIMIT 1")
    assert latest["judge_model"] == "openai/gpt-4o-mini"
    rows = {r["metric"]: r for r in _rows(db, "SELECT metric, judge_model, judge_calls, cost_usd, prompt_tokens, "
                                              "completion_tokens, details FROM judgeflow.eval_results "
                                              "WHERE trace_id = 't7'")}
    assert {m for m, r in rows.items() if (r["details"] or {}).get("reused_from") == "t6"} == {
        "toxicity", "hallucination", "helpfulness"}
    grounded = rows["grounded"]
    mini = map_prices("openai/gpt-4o-mini")
    assert (grounded["judge_model"], grounded["judge_calls"]) == ("openai/gpt-4o-mini", 1)
    assert grounded["cost_usd"] == pytest.approx(
        (grounded["prompt_tokens"] * mini.input_per_mtok + grounded["completion_tokens"] * mini.output_per_mtok) / 1e6)
    assert [r.model for r in judge_server.requests[asked:]] == ["gpt-4o-mini"]  # the one call of the night
    assert _rows(db, "SELECT rule FROM judgeflow.alert_events WHERE rule LIKE 'grounded%'") == []


async def _artifacts(flow_run_id: str) -> list[dict]:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        response = await client._client.post("/artifacts/filter", json={
            "artifacts": {"key": {"any_": ["judgeflow-run-summary"]}, "flow_run_id": {"any_": [flow_run_id]}}})
        response.raise_for_status()
        return json.loads(response.json()[0]["data"])


def _stored_steps_are_not_written_again(db, judge_server, version: str) -> None:
    """A new process (the file read afresh) finds the stored steps: backfill --rescore judges every pair again
    with the same steps and version, and asks for no steps."""
    from judgeflow.metrics.geval import file

    file._SPECS.clear()
    out = _cli("backfill", "--since", "1d", "--until", "0s", "--rescore", "--yes")
    # its estimate prices grounded at its own model's price
    assert "at JUDGEFLOW_JUDGE_INPUT/OUTPUT_COST_PER_MTOK; grounded at litellm's price map for openai/gpt-4o;" in out
    assert (judge_server.calls("GEvalScore"), judge_server.calls("GEvalSteps")) == (20, 1)
    assert registered()["grounded"].version == version
    rows = _rows(db, "SELECT metric_version, flow_run_id FROM judgeflow.eval_results WHERE metric = 'grounded'")
    assert {r["metric_version"] for r in rows} == {version} and len({r["flow_run_id"] for r in rows}) == 1


def _editing_the_criteria_starts_an_epoch_and_pages_nothing(db, path: Path) -> None:
    path.write_text(FILE.replace("instead of refusing.", "instead of refusing, and politely."), encoding="utf-8")
    insert_traces(db, [{"id": "t6", "created_at": datetime.now(timezone.utc) - timedelta(minutes=1),
                        "input": "Hi", "output": "Hello! [geval=1]", "metadata": {"app": "a"}}])
    _cli("score")
    epochs = _rows(db, "SELECT metric_version FROM judgeflow.judge_epochs WHERE metric = 'helpfulness' ORDER BY id")
    assert len(epochs) == 2 and epochs[1]["metric_version"] == registered()["helpfulness"].version
    assert epochs[0]["metric_version"] != epochs[1]["metric_version"]
    (t6,) = _rows(db, "SELECT metric_version, score FROM judgeflow.eval_results WHERE trace_id = 't6' AND "
                      "metric = 'helpfulness'")
    assert t6 == {"metric_version": epochs[1]["metric_version"], "score": 0.1}
    fired = _rows(db, "SELECT rule FROM judgeflow.alert_events WHERE rule = 'helpfulness_regression'")
    assert fired == []


def _removed_from_the_file_its_results_stay(db, path: Path) -> None:
    path.write_text(FILE.split("[metrics.grounded]")[0], encoding="utf-8")
    status = _cli("status")
    assert "grounded: not scored now (no built-in, plugin or metrics file of these settings serves it)" in status
    assert "its 8 stored result(s) are kept" in status, status
    assert len(_rows(db, "SELECT 1 FROM judgeflow.eval_results WHERE metric = 'grounded'")) == 8  # t0-t7
    assert not any(line.startswith("grounded ") for line in status.splitlines())  # not in the table of served


def test_calibrate_and_shadow_judge_a_file_metric(file_env, db, judge_server, tmp_path):
    from judgeflow.flows.calibration import calibrate_judge
    from judgeflow.flows.shadow import shadow_score

    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("\n".join(json.dumps(x) for x in [
        {"input": "q", "output": "No. [geval=1]", "labels": {"helpfulness": "fail"}},
        {"input": "q", "output": "Partly. [geval=4]", "labels": {"helpfulness": True}},
        {"input": "q", "output": "Yes, like this. [geval=6]", "labels": {"helpfulness": "pass"}},
        {"input": "q", "output": "Here you go.", "labels": {"helpfulness": False}},
    ]) + "\n")
    markdown = calibrate_judge(str(labelled))
    assert "## helpfulness" in markdown and "(fails when score < threshold)" in markdown
    assert "kappa 1.000, precision 1.000, recall 1.000" in markdown
    assert "best agreement: threshold 0.6 (any value above 0.4 up to 0.6 decides the same)" in markdown

    _first_night(db, judge_server)
    asked = len(judge_server.requests)
    report = shadow_score(since=datetime.now(timezone.utc) - timedelta(days=1), judge_model="openai/judge-b",
                          metrics=["helpfulness", "grounded"], per_segment=10)
    by_metric = {m.metric: m for m in report.metrics}
    assert (by_metric["helpfulness"].compared, by_metric["grounded"].compared) == (6, 6)
    assert by_metric["helpfulness"].confusion == {"both_pass": 4, "only_candidate_fails": 0,
                                                  "only_current_fails": 0, "both_fail": 2}
    assert judge_server.calls("GEvalSteps") == 1  # the candidate judges with the stored steps
    # the candidate judges every metric, grounded (judged by its own gpt-4o in the run) included
    shadowed = [r.model for r in judge_server.requests[asked:]
                if any("supported by the context" in str(m.get("content")) for m in r.messages)]
    assert shadowed == ["judge-b"] * 6


def test_the_offline_judge_skips_a_file_metric_with_its_reason(file_env, db, monkeypatch):
    from judgeflow.flows.scoring import score_new_traces

    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "offline")
    insert_traces(db, [{"id": f"o{i}", "created_at": datetime.now(timezone.utc) - timedelta(minutes=5),
                        "input": "q", "output": f"A plain answer {i}.", "context": ["doc"]} for i in range(2)])
    summary = score_new_traces(evaluate_alerts=False)
    assert summary.failed == 0
    rows = _rows(db, "SELECT metric, status, reason FROM judgeflow.eval_results WHERE metric IN "
                     "('helpfulness', 'grounded') ORDER BY metric, trace_id")
    assert [(r["metric"], r["status"]) for r in rows] == [("grounded", "skipped")] * 2 + [
        ("helpfulness", "skipped")] * 2
    assert {r["reason"] for r in rows} == {NO_RUBRIC.format(name="grounded"), NO_RUBRIC.format(name="helpfulness")}
    assert _rows(db, "SELECT count(*) AS n FROM judgeflow.eval_results WHERE status = 'scored'") == [{"n": 4}]


def test_the_sample_budget_prices_a_file_metric_in_every_stratum(file_env, db):
    """A night with file metrics costs the built-ins' pairs plus exactly the file metrics' pairs, stratum by
    stratum (the night's plan, without judging)."""
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.judge.pricing import map_prices, prices_for
    from judgeflow.metrics.cost import estimate_pair_cost
    from judgeflow.tasks.claims import plan_source_reads
    from judgeflow.run.metric_door import entry_settings
    from judgeflow.tasks.sampling import night_plan

    now = datetime.now(timezone.utc)
    rows = [{"id": f"s{i}", "created_at": now - timedelta(hours=2, seconds=i), "input": "q" * (10 + i),
             "output": "an answer " * (1 + i), "context": ["doc"], "metadata": {"app": "ab"[i % 2]}} for i in range(8)]
    insert_traces(db, rows)
    settings = entry_settings()  # as a command builds its settings: the file's metrics served with them
    migrate.upgrade(engine_for(settings))

    def night(metrics: list[str]):
        plan = plan_source_reads.fn(settings, metrics)
        return night_plan(settings, plan, metrics, since=None, until=None, sample_rate=1.0, record=False,
                          flow_run_id=None)

    every, builtins = night(list(registered())), night(["toxicity", "hallucination"])
    prices = prices_for(settings)
    # grounded at its own model's price in litellm's map; the others at the run judge's configured 1/2 USD per Mtok
    assert prices.of("grounded") == map_prices("openai/gpt-4o") and prices.of("grounded").input_per_mtok != 1.0
    assert (prices.of("helpfulness").input_per_mtok, prices.of("helpfulness").output_per_mtok) == (1.0, 2.0)
    for stratum in ("app=a", "app=b"):
        mine = [r for r in rows if f"app={r['metadata']['app']}" == stratum]
        extra = sum(estimate_pair_cost(prices, metric, input=r["input"], output=r["output"], context=r["context"],
                                       max_field_chars=settings.max_field_chars)
                    for r in mine for metric in ("helpfulness", "grounded"))
        assert extra > 0
        (with_file,) = [s for s in every.rows if s.stratum == stratum]
        (without,) = [s for s in builtins.rows if s.stratum == stratum]
        assert (with_file.traffic, without.traffic) == (4, 4)
        assert with_file.est_cost_usd == pytest.approx(without.est_cost_usd + extra)
    assert every.full_cost_usd > builtins.full_cost_usd


def test_a_metric_whose_steps_the_judge_cannot_write_waits_and_the_others_are_scored(file_env, db, judge_server):
    from judgeflow.flows.scoring import score_new_traces

    file_env.write_text(FILE + '\n[metrics.broken]\ncriteria = "Never writable. [steps-fail]"\n', encoding="utf-8")
    insert_traces(db, [{"id": f"w{i}", "created_at": datetime.now(timezone.utc) - timedelta(minutes=5),
                        "input": "q", "output": f"An answer {i}.", "context": ["doc"]} for i in range(2)])
    alone = score_new_traces(evaluate_alerts=False, metrics=["broken"])
    assert (alone.scored, alone.failed) == (0, 0)
    assert any(n.startswith("broken: not scored this run: the judge could not write what it needs first")
               for n in alone.notes), alone.notes
    summary = score_new_traces(evaluate_alerts=False)
    assert (summary.scored, summary.failed) == (8, 0)  # four metrics, two traces; broken waits
    assert _rows(db, "SELECT count(*) AS n FROM judgeflow.eval_results WHERE metric = 'broken'") == [{"n": 0}]
    assert _rows(db, "SELECT metric FROM judgeflow.metric_steps ORDER BY metric") == [{"metric": "grounded"}]
    status = json.loads((out := _cli("status", "--json"))[out.index("{"):])
    assert status["metrics"]["broken"]["pending"] == 2 and status["metrics"]["helpfulness"]["pending"] == 0
