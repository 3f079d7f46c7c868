"""A dead delivery is reported whatever the channel: a log line, a Prefect event
(read back from the real Prefect server), a line in `judgeflow alerts` and
`judgeflow status`; and a "resolved" whose "fired" died tells its receiver so.
Real HTTP to a local receiver, the real database."""

from __future__ import annotations

import logging

from typer.testing import CliRunner

from judgeflow.alerts import evaluate_rules
from judgeflow.cli.alerts import alerts_app
from judgeflow.alerts.dead_letters import dead_event_id
from tests.alerts.helpers import add_results, make_settings
from tests.alerts.test_prefect_events import read_event
from tests.support.webhook_receiver import WebhookReceiver

runner = CliRunner()


def test_a_dead_fired_is_reported_everywhere_and_its_resolved_says_so(engine, database_url, prefect_server,
                                                                        caplog, monkeypatch):
    with WebhookReceiver(script=[410], secret="s") as hook:  # the first request is refused for good, then 200
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_secret="s")
        add_results(engine, not_passed=20)
        with caplog.at_level(logging.WARNING, logger="judgeflow.alerts"):
            first = {r.rule: r for r in evaluate_rules(settings, engine=engine) if not r.segment}
        fired = first["toxicity_rate"]
        assert fired.transition == "fired" and fired.deliveries["webhook"]["status"] == "dead"
        assert any("dead" in r.getMessage() and "toxicity_rate" in r.getMessage() for r in caplog.records)

        # a Prefect event although the dead channel is the webhook and Prefect events are off
        event = read_event(str(dead_event_id(fired.delivery_id, "webhook")))
        assert event.event == "judgeflow.alert.delivery.dead"
        assert event.resource["judgeflow.rule"] == "toxicity_rate"
        assert event.payload["channel"] == "webhook" and event.payload["notification"] == "fired"
        assert "410" in event.payload["error"]

        add_results(engine, passed=2000)
        later = {r.rule: r for r in evaluate_rules(settings, engine=engine) if not r.segment}
        assert later["toxicity_rate"].transition == "resolved"
        [resolved] = [r.json() for r in hook.accepted()
                      if r.json()["rule"] == "toxicity_rate" and r.json()["notification"] == "resolved"]
        assert resolved["fired_delivery"]["status"] == "dead"
        assert "never reached this channel" in resolved["note"]
        assert all(r.verified for r in hook.requests if r.json()["notification"] == "resolved")  # signed as sent

    listed = runner.invoke(alerts_app, [], env={"JUDGEFLOW_DATABASE_URL": database_url})
    assert listed.exit_code == 0, listed.output
    assert "1 alert delivery is dead (webhook;" in listed.output

    from judgeflow.cli import app
    from tests.support.traces import create_source

    create_source(engine)
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", database_url)
    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert "1 alert delivery is dead (webhook;" in status.output
    as_json = runner.invoke(app, ["status", "--json"])
    assert '"count": 1' in as_json.output and '"webhook"' in as_json.output


def test_a_resolved_whose_fired_arrived_carries_no_note(engine, database_url):
    with WebhookReceiver() as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url)
        add_results(engine, not_passed=20)
        evaluate_rules(settings, engine=engine)
        add_results(engine, passed=2000)
        evaluate_rules(settings, engine=engine)
        [resolved] = [r.json() for r in hook.accepted()
                      if r.json()["rule"] == "toxicity_rate" and r.json()["notification"] == "resolved"]
    assert "note" not in resolved and "fired_delivery" not in resolved


def test_the_slack_message_of_a_resolved_whose_fired_died_says_so():
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from judgeflow.alerts.notify import slack_message, with_dead_fired

    payload = {
        "rule": "toxicity_rate", "notification": "resolved", "rate": 0.01, "threshold": 0.05, "window": "24h",
        "sample_size": 2020, "failed_count": 0, "metric": "toxicity", "flow_run_id": None, "run_url": None,
        "worst_traces": [],
    }
    fired = SimpleNamespace(id=7, occurred_at=datetime(2026, 11, 26, 3, 0, tzinfo=timezone.utc),
                            last_error="HTTP 410: gone")
    sent = with_dead_fired(payload, fired)
    assert sent["fired_delivery"] == {"status": "dead", "notification_id": 7, "occurred_at": "2026-11-26T03:00:00Z",
                                      "error": "HTTP 410: gone"}
    last = slack_message(sent)["text"].splitlines()[-1]
    assert last.startswith(":warning: this alert's 'fired' notification (2026-11-26T03:00:00Z) never reached")
    assert "HTTP 410: gone" in last
    assert "never reached" not in slack_message(payload)["text"]


def test_a_fired_that_dies_inside_alerts_check_emits_its_dead_event(engine, database_url, prefect_server, tmp_path):
    """`judgeflow alerts check` as its own process: the event is sent before it exits."""
    import os
    import subprocess
    import sys

    import sqlalchemy as sa

    add_results(engine, not_passed=20)
    with WebhookReceiver(default=404) as hook:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
        env.update(JUDGEFLOW_DATABASE_URL=database_url, JUDGEFLOW_ALERT_WEBHOOK_URL=hook.url,
                   JUDGEFLOW_ALERT_MIN_SAMPLES="10", JUDGEFLOW_ALERT_PREFECT_EVENTS="false",
                   PREFECT_API_URL=prefect_server)
        done = subprocess.run([sys.executable, "-m", "judgeflow", "alerts", "check"], env=env, capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
        assert hook.requests, done.stderr
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        [delivery_id] = conn.execute(sa.text(
            "SELECT e.delivery_id FROM judgeflow.alert_deliveries d JOIN judgeflow.alert_events e ON e.id = d.event_id "
            "WHERE d.status = 'dead' AND d.channel = 'webhook' AND e.rule = 'toxicity_rate'")).one()
    event = read_event(str(dead_event_id(str(delivery_id), "webhook")))
    assert event.event == "judgeflow.alert.delivery.dead" and event.payload["notification"] == "fired"
