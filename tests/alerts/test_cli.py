"""`judgeflow alerts` and `judgeflow alerts check` against the real database."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from judgeflow.cli.alerts import alerts_app
from tests.alerts.helpers import add_results, migrated
from tests.support.webhook_receiver import WebhookReceiver

runner = CliRunner()


@pytest.fixture
def env(monkeypatch, tmp_path, database_url, prefect_server):
    monkeypatch.chdir(tmp_path)  # no stray .env
    for key, value in {
        "PREFECT_API_URL": prefect_server,  # `alerts check` uses the runs' Prefect server, never starts its own here
        "JUDGEFLOW_DATABASE_URL": database_url,
        "JUDGEFLOW_ALERT_MIN_SAMPLES": "10",
        "JUDGEFLOW_ALERT_WEBHOOK_BACKOFF_S": "0.01",
        "JUDGEFLOW_ALERT_PREFECT_EVENTS": "false",
        "JUDGEFLOW_FAILURE_RATE_MAX": "0.5",
    }.items():
        monkeypatch.setenv(key, value)


def test_listing_before_anything_was_evaluated(env):
    result = runner.invoke(alerts_app, [])
    assert result.exit_code == 0, result.output
    assert "toxicity_rate" in result.output and "never evaluated" in result.output
    assert re.search(r"^hallucination_rate +disabled", result.output, re.M)
    assert "No alerts yet." in result.output


def test_check_then_list(env, db, monkeypatch):
    engine = migrated(db)
    add_results(engine, passed=8, not_passed=4, failed=1)
    with WebhookReceiver(default=500) as hook:
        monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_URL", hook.url)
        monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_RETRIES", "1")
        result = runner.invoke(alerts_app, ["check"])
        assert result.exit_code == 0, result.output
        assert len(hook.requests) == 2
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    assert "FIRING" in lines["toxicity_rate"] and "33.3%" in lines["toxicity_rate"]
    assert "fired (failed: webhook: HTTP 500" in lines["toxicity_rate"]
    assert "OK" in lines["judge_failure_rate"] and "7.7%" in lines["judge_failure_rate"] and "13/10" in lines["judge_failure_rate"]
    assert "disabled" in lines["hallucination_rate"]
    assert "notification delivery failed" in result.stderr

    result = runner.invoke(alerts_app, ["check", "--fail-on-firing"])
    assert result.exit_code == 1

    listing = runner.invoke(alerts_app, [])
    assert listing.exit_code == 0, listing.output
    out = listing.output
    assert "Alert rules (window 24h, at least 10 samples, re-notify never)" in out
    current = next(line for line in out.splitlines() if line.startswith("toxicity_rate "))
    assert "FIRING" in current and "12/10" in current and "failed: webhook: HTTP 500" in current
    # the failed notification waits in the outbox, with how often it was tried
    waiting_section = out.split("Undelivered notifications")[1].split("Past alerts")[0]
    [waiting] = [line for line in waiting_section.splitlines() if " fired " in line]
    cells = waiting.split()
    assert cells[3:8] == ["toxicity_rate", "fired", "webhook", "1", "2"], waiting  # 1 evaluation, 2 requests
    assert "HTTP 500" in waiting
    assert "Past alerts (newest first, up to 20)" in out
    past = [line for line in out.split("Past alerts")[1].splitlines() if " fired " in line]
    assert len(past) == 1 and "toxicity_rate" in past[0]

    only = runner.invoke(alerts_app, ["--rule", "judge_failure_rate"])
    assert "No alerts yet for judge_failure_rate." in only.output


def test_not_enough_data_is_shown(env, db):
    engine = migrated(db)
    add_results(engine, not_passed=3)
    result = runner.invoke(alerts_app, ["check"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("toxicity_rate"))
    assert "not enough data" in line and "3/10" in line


def test_bad_settings_are_one_clear_line(env, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_ALERT_WINDOW", "forever")
    result = runner.invoke(alerts_app, ["check"])
    assert result.exit_code == 2
    assert result.stderr.startswith("judgeflow: not a duration: 'forever'")
