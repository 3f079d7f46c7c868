"""Judge epochs on the real database: recording, where the first one starts, which
results each rule counts, and where `judgeflow report`, the trend artifact and
`judgeflow alerts` mark them."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.alerts.service import evaluate_rules
from judgeflow.alerts.trend import compute_trend, render_markdown, render_text
from judgeflow.db.epochs import current_epochs, record_epochs
from tests.alerts.helpers import add_results, make_settings, migrated

# what make_settings' results are read from (results without a source count as its)
SOURCE = "table:llm_traces@results-db"


def _set(engine, sql: str, **params) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def test_an_epoch_is_recorded_once_per_change_of_model_or_version(db):
    engine = migrated(db)
    with engine.begin() as conn:
        [first] = record_epochs(conn, SOURCE, {"toxicity": ("toxicity/3+aa", "gpt-4o")}, flow_run_id="r1")
        assert first.previous is None
        assert record_epochs(conn, SOURCE, {"toxicity": ("toxicity/3+aa", "gpt-4o")}) == []  # unchanged: nothing
        [model] = record_epochs(conn, SOURCE, {"toxicity": ("toxicity/3+aa", "gpt-4o-mini")})
        [version] = record_epochs(conn, SOURCE, {"toxicity": ("toxicity/3+bb", "gpt-4o-mini")})
        assert "judge model gpt-4o -> gpt-4o-mini" in model.describe()
        assert "metric version toxicity/3+aa -> toxicity/3+bb" in version.describe()
        assert model.epoch.started_at < version.epoch.started_at
        epochs = current_epochs(conn, SOURCE)
    assert epochs["toxicity"].combination == ("toxicity/3+bb", "gpt-4o-mini")
    assert "hallucination" not in epochs


def test_the_first_epoch_keeps_the_results_of_its_version_scored_before_epochs_existed(db):
    """Upgrading judgeflow must not throw away a week of baseline: the first epoch
    starts at the first result of the current version after the last of another."""
    engine = migrated(db)
    old = add_results(engine, not_passed=3, age=timedelta(days=5))
    add_results(engine, passed=5, not_passed=2, age=timedelta(days=4))
    _set(engine, "UPDATE judgeflow.eval_results SET metric_version = 'toxicity/2+old', "
                 "scored_at = now() - interval '5 days' WHERE trace_id = ANY(:ids)", ids=old)
    _set(engine, "UPDATE judgeflow.eval_results SET metric_version = 'toxicity/3+new', "
                 "scored_at = now() - interval '4 days' WHERE metric_version IS NULL")
    with engine.begin() as conn:
        [started] = record_epochs(conn, SOURCE, {"toxicity": ("toxicity/3+new", "gpt-4o")})
        first_new = conn.execute(sa.text(
            "SELECT min(scored_at) FROM judgeflow.eval_results WHERE metric_version = 'toxicity/3+new'")).scalar()
    assert started.epoch.started_at == first_new


def test_rules_count_only_the_epoch_in_force_and_say_when_the_judge_changed(db, database_url):
    engine = migrated(db)
    settings = make_settings(database_url, alert_min_samples=10, toxicity_rate_max=0.2, failure_rate_max=0.5,
                             hallucination_rate_max=None)
    add_results(engine, passed=20, not_passed=20, failed=30, age=timedelta(hours=2))  # the old judge: 50%
    with engine.begin() as conn:
        record_epochs(conn, SOURCE, {"toxicity": ("v1", "judge-a"), "hallucination": ("h1", "judge-a")})
    # results of the old judge were written before its epoch was recorded here: move them before it
    _set(engine, "UPDATE judgeflow.eval_results SET metric_version = 'v1', scored_at = now() - interval '1 hour'")
    _set(engine, "UPDATE judgeflow.judge_epochs SET started_at = now() - interval '2 hours'")
    with engine.begin() as conn:
        [changed] = record_epochs(conn, SOURCE, {"toxicity": ("v1", "judge-b")})
    fresh = add_results(engine, passed=4, not_passed=1, failed=1, age=timedelta(hours=1))
    _set(engine, "UPDATE judgeflow.eval_results SET metric_version = 'v1' WHERE trace_id = ANY(:ids) "
                 "AND status <> 'failed'", ids=fresh)

    by_rule = {e.rule: e for e in evaluate_rules(settings, engine=engine) if not e.segment}
    rate = by_rule["toxicity_rate"]
    assert (rate.outcome, rate.sample_size, rate.violations) == ("insufficient_data", 5, 1)
    assert rate.epoch_started_at == changed.epoch.started_at
    assert rate.summary.startswith("insufficient data: judge changed at ")
    # failed scorings have no version: their time puts them in the new epoch (1 of 6), not the old 30
    failures = by_rule["judge_failure_rate"]
    assert failures.failed_count == 1 and failures.outcome == "insufficient_data"

    # enough results of the new judge: the rule decides on them alone (1 of 11 is below 20%, though the
    # old judge's 50% is still in the window)
    more = add_results(engine, passed=6, age=timedelta(minutes=30))
    _set(engine, "UPDATE judgeflow.eval_results SET metric_version = 'v1' WHERE trace_id = ANY(:ids)", ids=more)
    rate = next(e for e in evaluate_rules(settings, engine=engine) if e.rule == "toxicity_rate" and not e.segment)
    assert (rate.outcome, rate.state, rate.sample_size, rate.violations) == ("ok", "ok", 11, 1)

    # the trend and the report mark where the epoch started
    with engine.connect() as conn:
        trend = compute_trend(conn, settings, days=3)
    text = render_text(trend)
    assert "judge changed" in text
    assert "judge epoch started" in text and "v1 judged by judge-b" in text
    assert "judge changed" in render_markdown(trend)


def test_judgeflow_alerts_lists_the_epochs_and_the_reason(db, database_url, monkeypatch, tmp_path):
    from judgeflow.cli.alerts import alerts_app

    engine = migrated(db)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", database_url)
    monkeypatch.setenv("JUDGEFLOW_ALERT_PREFECT_EVENTS", "false")
    add_results(engine, passed=30, age=timedelta(hours=2))
    _set(engine, "UPDATE judgeflow.eval_results SET metric_version = 'v1', scored_at = now() - interval '1 hour'")
    with engine.begin() as conn:
        # the first epoch takes the results of its version scored before it: judge-a's
        record_epochs(conn, SOURCE, {"toxicity": ("v1", "judge-a")}, flow_run_id="run-41")
        record_epochs(conn, SOURCE, {"toxicity": ("v1", "judge-b")}, flow_run_id="run-42")
    evaluate_rules(make_settings(database_url, alert_min_samples=10), engine=engine)
    result = CliRunner().invoke(alerts_app, [])
    assert result.exit_code == 0, result.output
    assert "Judge epochs" in result.output and "judge-b" in result.output and "run-42" in result.output
    assert "insufficient data: judge changed at " in result.output
