"""Results kept per source (judgeflow/sources/identity.py, results.py): two sources
scored into one results database, each counted alone by status, show and the alert
rules; the switch announced; results from before sources were recorded adopted by the
source configured then; a preset's skips named as its decision."""

from __future__ import annotations

import collections
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from judgeflow.db import migrate
from judgeflow.db.result_sources import adopt_source
from tests.support.litellm_fixtures import by_scenario
from tests.support.litellm_proxy import insert_spend_logs
from tests.support.traces import insert_traces, results, scripted_trace

runner = CliRunner()
TABLE = "table:llm_traces@results-db"


def _scored(stored, source: str, metric: str = "toxicity") -> int:
    return sum(1 for (_, m), r in stored.items() if r["source"] == source and m == metric and r["status"] == "scored")


@pytest.fixture
def two_sources(prefect_server, judgeflow_env, db, litellm_db, spend_log_rows, monkeypatch):
    """The table source scored first, then JUDGEFLOW_SOURCE switched to litellm on the same
    results database and scored: (summary of the second run, litellm's source identity)."""
    from judgeflow.flows.scoring import score_new_traces

    insert_traces(db, [scripted_trace(i)[0] for i in range(8)])
    first = score_new_traces(evaluate_alerts=False)
    assert first.scored == 16 and not [n for n in first.notes if "source" in n]
    url, conninfo = litellm_db
    assert insert_spend_logs(conninfo, spend_log_rows) == len(spend_log_rows)
    monkeypatch.setenv("JUDGEFLOW_SOURCE", "litellm")
    monkeypatch.setenv("JUDGEFLOW_SOURCE_DATABASE_URL", url)
    second = score_new_traces(evaluate_alerts=False)
    host_db = url.split("@", 1)[1]
    return second, f"litellm:LiteLLM_SpendLogs@{host_db}"


def test_two_sources_into_one_results_database_are_counted_apart(two_sources, db):
    from judgeflow.alerts.evaluation import segment_figures
    from judgeflow.alerts.rules import all_rules
    from judgeflow.status.work import work_status
    from judgeflow.config.settings import load_settings

    second, litellm = two_sources
    stored = results(db)
    assert collections.Counter(r["source"] for r in stored.values()) == {TABLE: 16, litellm: len(stored) - 16}
    [announced] = [n for n in second.notes if "source changed" in n]
    assert f"{litellm} is new in this results database" in announced and f"16 of {TABLE}" in announced

    settings = load_settings()
    report = work_status(settings)
    toxicity = report["metrics"]["toxicity"]
    assert toxicity["scored"] == _scored(stored, litellm) and toxicity["scored"] < _scored(stored, TABLE) + _scored(
        stored, litellm)
    assert report["source"] == litellm and report["other_sources"] == {TABLE: 16}
    assert any(f"also holds results of other sources (16 of {TABLE})" in n for n in report["source_notes"])

    # the alert rules and the trend count the configured source's results only
    rule = next(r for r in all_rules(settings) if r.name == "toxicity_rate")
    rule = replace(rule, window_s=400 * 86400.0, baseline_s=86400.0)  # every stored trace is in the window
    now = datetime.now(timezone.utc)
    assert rule.source == litellm
    assert segment_figures(db.connect(), rule, now=now)[0].sample_size == _scored(stored, litellm)
    assert segment_figures(db.connect(), replace(rule, source=TABLE), now=now)[0].sample_size == _scored(stored, TABLE)


def test_show_and_status_name_a_presets_skip_as_its_decision(two_sources, db, spend_log_rows):
    from judgeflow.cli import app

    _, litellm = two_sources
    tool_call = by_scenario(spend_log_rows)["tool_call"][0]["request_id"]
    shown = runner.invoke(app, ["show", tool_call])
    assert shown.exit_code == 0, shown.output
    assert ("toxicity: skipped by the litellm preset: the reply is a tool call (get_weather) with no text to judge"
            in shown.stdout)
    assert "the preset's decision: no judge was asked, nothing was spent" in shown.stdout
    assert "judge abstained" not in shown.stdout and "unknown judge" not in shown.stdout
    assert "cost:" not in shown.stdout

    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert f"source: {litellm}" in status.stdout
    assert "of the skipped were skipped by the litellm preset (no judge asked, no cost)" in status.stdout
    assert "the reply is a tool call (get_weather) with no text to judge" in status.stdout

    other = runner.invoke(app, ["show", "tr-0000"])  # a trace of the table source
    assert other.exit_code == 0, other.output
    assert f"read from {TABLE}, another source (not counted here)" in other.stdout


def test_results_from_before_sources_were_recorded_belong_to_the_source_configured_then(empty_db):
    db = empty_db
    migrate.upgrade(db, "0008")
    with db.begin() as conn:
        for i, status in enumerate(["scored", "scored", "failed"]):
            conn.execute(text("INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed) "
                              "VALUES (:t, 'toxicity', :s, 0.0, true)"), {"t": f"old-{i}", "s": status})
        conn.execute(text("INSERT INTO judgeflow.alerts (rule, segment_key, state) VALUES ('toxicity_rate', '', "
                          "'firing')"))
    migrate.upgrade(db)
    with db.begin() as conn:
        state = adopt_source(conn, TABLE)
    with db.begin() as conn:
        again = adopt_source(conn, TABLE)
        sources = conn.execute(text("SELECT DISTINCT source FROM judgeflow.eval_results")).scalars().all()
        counts = conn.execute(text("SELECT source, status, sum(n) FROM judgeflow.result_counts "
                                   "GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 2")).all()
        alert_states = conn.execute(text("SELECT source, state FROM judgeflow.alerts")).all()
        elsewhere = adopt_source(conn, "phoenix:spans@results-db")
    assert state.new and state.adopted == 3 and not state.others
    assert state.notes() == [f"3 result(s) stored before judgeflow recorded sources were assigned to {TABLE}, "
                             "the source configured now"]
    assert not again.new and again.adopted == 0 and again.notes() == []
    assert sources == [TABLE]
    assert counts == [(TABLE, "failed", 1), (TABLE, "scored", 2)]
    assert alert_states == [(TABLE, "firing")]  # the alert state of that time is the same source's
    assert elsewhere.new and elsewhere.others == {TABLE: 3}


def test_a_source_never_inherits_another_sources_alert_state(db, database_url):
    from judgeflow.alerts.rules import all_rules
    from judgeflow.alerts.state import current_alerts, evaluate_rule_segments
    from judgeflow.config.settings import Settings

    migrate.upgrade(db)
    created = datetime.now(timezone.utc)
    phoenix = "phoenix:spans@results-db"
    with db.begin() as conn:
        for i in range(20):  # the table source's replies are all toxic, Phoenix's all fine
            for source, passed in ((TABLE, False), (phoenix, True)):
                conn.execute(text(
                    "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, threshold, "
                    "trace_created_at, source) VALUES (:t, 'toxicity', 'scored', :s, :p, 0.5, :at, :src)"),
                    {"t": f"{source[:5]}-{i}", "s": 0.0 if passed else 0.9, "p": passed, "at": created, "src": source})
    settings = Settings(_env_file=None, database_url=database_url, alert_min_samples=10)
    rule = next(r for r in all_rules(settings) if r.name == "toxicity_rate")
    [fired] = evaluate_rule_segments(db, replace(rule, source=TABLE))
    [other] = evaluate_rule_segments(db, replace(rule, source=phoenix))
    assert (fired.state, fired.transition, fired.figures.sample_size) == ("firing", "fired", 20)
    assert (other.state_before, other.state, other.transition) == ("ok", "ok", None)  # nothing inherited
    with db.connect() as conn:
        assert [(r.source, r.state) for r in current_alerts(conn, source=phoenix)] == [(phoenix, "ok")]
        assert [(r.source, r.state) for r in current_alerts(conn, source=TABLE)] == [(TABLE, "firing")]
        events = conn.execute(text("SELECT source, kind FROM judgeflow.alert_events")).all()
    assert events == [(TABLE, "fired")]


def test_downgrade_keeps_the_counts_and_one_alert_state_per_rule(db):
    from alembic import command

    migrate.upgrade(db)
    with db.begin() as conn:
        for source in (TABLE, "phoenix:spans@results-db"):
            conn.execute(text("INSERT INTO judgeflow.eval_results (trace_id, metric, status, source) "
                              "VALUES (:t, 'toxicity', 'skipped', :s)"), {"t": source[:5], "s": source})
            conn.execute(text("INSERT INTO judgeflow.alerts (source, rule, segment_key, state) "
                              "VALUES (:s, 'toxicity_rate', '', 'ok')"), {"s": source})
    with db.begin() as conn:
        config = migrate._config()
        config.attributes["connection"] = conn
        command.downgrade(config, "0008")
    with db.begin() as conn:
        conn.execute(text("INSERT INTO judgeflow.eval_results (trace_id, metric, status) "
                          "VALUES ('later', 'toxicity', 'skipped')"))  # the 10_watermarks.py trigger counts again
        counts = conn.execute(text("SELECT status, sum(n) FROM judgeflow.result_counts GROUP BY 1")).all()
        alerts = conn.execute(text("SELECT rule FROM judgeflow.alerts")).scalars().all()
    assert counts == [("skipped", 3)] and alerts == ["toxicity_rate"]
    assert migrate.upgrade(db) == migrate.head_revision()
