"""At-least-once delivery: notifications wait in the outbox until each channel
confirms, over real HTTP to local receivers that are down, failing, or killed
mid-request, and a real `judgeflow alerts check` process killed mid-send."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import sqlalchemy as sa

from judgeflow.alerts import evaluate_rules
from judgeflow.alerts.notify import configured_channels
from judgeflow.alerts.rules import all_rules
from judgeflow.alerts.state import evaluate_rule
from judgeflow.db.alert_tables import alert_deliveries
from tests.alerts.helpers import add_results, alert_events_rows, alert_row, make_settings
from tests.support.webhook_receiver import WebhookReceiver, free_port, url_on


def toxicity(results):
    return next(r for r in results if r.rule == "toxicity_rate")


def deliveries(engine) -> dict[tuple[int, str], tuple[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(alert_deliveries).order_by(alert_deliveries.c.event_id)).all()
    return {(r.event_id, r.channel): (r.status, r.tries) for r in rows}


def test_receiver_down_when_it_fires_gets_exactly_one_fired_when_back(engine, database_url):
    port = free_port()
    settings = make_settings(database_url, alert_webhook_url=url_on(port), alert_webhook_retries=1)
    add_results(engine, not_passed=20)
    first = toxicity(evaluate_rules(settings, engine=engine))  # connection refused, twice
    assert first.transition == "fired" and first.delivery_status == "failed"
    assert first.deliveries["webhook"]["attempts"] == 2 and first.deliveries["webhook"]["status"] == "failed"
    [event] = alert_events_rows(engine)
    assert deliveries(engine) == {(event.id, "webhook"): ("pending", 1)}

    with WebhookReceiver(port=port) as hook:
        second = toxicity(evaluate_rules(settings, engine=engine))
        assert [r.json()["notification"] for r in hook.delivered()] == ["fired"]
        assert hook.ids() == [str(event.delivery_id)]
        body = hook.requests[0].json()
        assert body["delivery_id"] == str(event.delivery_id) and body["alert_id"] == event.id
        assert second.transition is None
        assert second.redelivered == [{
            "alert_id": event.id, "notification": "fired", "channel": "webhook", "status": "delivered",
            "tries": 2, "error": None,
        }]

        third = toxicity(evaluate_rules(settings, engine=engine))
        assert len(hook.requests) == 1, "a delivered notification was sent again"
        assert third.redelivered == []

    row = alert_row(engine)
    assert (row.delivery_status, row.delivery_error, row.delivery_attempts) == ("delivered", None, 3)
    assert row.delivered_at is not None
    assert deliveries(engine) == {(event.id, "webhook"): ("delivered", 2)}


def test_receiver_failing_for_a_while_gets_it_once_it_answers_200(engine, database_url):
    with WebhookReceiver(script=[500] * 5) as hook:  # then 200
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_retries=1)
        add_results(engine, not_passed=20)
        statuses = []
        for _ in range(4):
            statuses.append(toxicity(evaluate_rules(settings, engine=engine)))
        assert [r.status for r in hook.requests] == [500, 500, 500, 500, 500, 200]
        assert len(set(hook.ids())) == 1 and hook.ids()[0] == statuses[0].delivery_id
        assert statuses[0].delivery_status == "failed"
        assert [r.redelivered[0]["status"] for r in statuses[1:3]] == ["failed", "delivered"]
        assert statuses[3].redelivered == []  # nothing left to send
    assert alert_row(engine).delivery_status == "delivered"
    assert alert_events_rows(engine)[0].deliveries["webhook"]["tries"] == 3


def test_slack_down_webhook_up_each_channel_delivered_once(engine, database_url):
    with WebhookReceiver(default=503) as slack, WebhookReceiver() as hook:
        settings = make_settings(
            database_url, alert_webhook_url=hook.url, alert_slack_webhook_url=slack.url, alert_webhook_retries=1
        )
        add_results(engine, not_passed=20)
        first = toxicity(evaluate_rules(settings, engine=engine))
        assert first.delivery_status == "partial"
        assert first.deliveries["webhook"]["status"] == "delivered"
        assert first.deliveries["slack"]["status"] == "failed"
        assert len(hook.requests) == 1 and len(slack.requests) == 2

        toxicity(evaluate_rules(settings, engine=engine))  # Slack still down
        assert len(hook.requests) == 1, "Slack's failure made the webhook repeat"
        assert len(slack.requests) == 4

        slack.default = 200  # Slack recovers
        again = toxicity(evaluate_rules(settings, engine=engine))
        assert [r.status for r in slack.requests] == [503] * 4 + [200]
        assert again.redelivered[0]["channel"] == "slack" and again.redelivered[0]["status"] == "delivered"
        toxicity(evaluate_rules(settings, engine=engine))
        assert len(hook.requests) == 1 and len(slack.requests) == 5
    [event] = alert_events_rows(engine)
    assert event.delivery_status == "delivered"
    assert {c: v["status"] for c, v in event.deliveries.items()} == {"webhook": "delivered", "slack": "delivered"}


def test_resolved_after_an_undelivered_fired_sends_both_in_order(engine, database_url):
    port = free_port()
    # a long redelivery backoff: the fired is not due again on its own ...
    settings = make_settings(
        database_url, alert_webhook_url=url_on(port), alert_webhook_retries=0, alert_redelivery_backoff_s=3600
    )
    add_results(engine, not_passed=20)
    assert toxicity(evaluate_rules(settings, engine=engine)).delivery_status == "failed"
    with WebhookReceiver(port=port) as hook:
        assert toxicity(evaluate_rules(settings, engine=engine)).redelivered == []  # backing off
        assert hook.requests == []
        # ... but the resolved makes it due at once, and they go out in order
        add_results(engine, passed=2000)
        resolved = toxicity(evaluate_rules(settings, engine=engine))
        assert resolved.transition == "resolved" and resolved.delivery_status == "delivered"
        assert [r.json()["notification"] for r in hook.requests] == ["fired", "resolved"]
        fired_event, resolved_event = alert_events_rows(engine)
        assert hook.ids() == [str(fired_event.delivery_id), str(resolved_event.delivery_id)]
        assert fired_event.superseded_by == resolved_event.id and fired_event.delivery_status == "delivered"
        toxicity(evaluate_rules(settings, engine=engine))
        assert len(hook.requests) == 2


def test_a_failing_fired_holds_back_the_resolved_behind_it(engine, database_url):
    with WebhookReceiver(default=503) as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_retries=0)
        add_results(engine, not_passed=20)
        evaluate_rules(settings, engine=engine)
        add_results(engine, passed=2000)
        resolved = toxicity(evaluate_rules(settings, engine=engine))
        # the fired failed again, so the resolved was not sent ahead of it
        assert [r.json()["notification"] for r in hook.requests] == ["fired", "fired"]
        assert resolved.delivery_status == "pending"
        hook.default = 200
        evaluate_rules(settings, engine=engine)
        assert [r.json()["notification"] for r in hook.requests] == ["fired", "fired", "fired", "resolved"]


def test_a_newer_notification_supersedes_an_undelivered_reminder(engine, database_url):
    port = free_port()
    settings = make_settings(
        database_url, alert_webhook_url=url_on(port), alert_webhook_retries=0, alert_renotify="1s",
    )
    add_results(engine, not_passed=20)
    evaluate_rules(settings, engine=engine)  # fired, undelivered
    time.sleep(1.1)
    assert toxicity(evaluate_rules(settings, engine=engine)).transition == "reminder"  # undelivered
    add_results(engine, passed=2000)
    with WebhookReceiver(port=port) as hook:
        assert toxicity(evaluate_rules(settings, engine=engine)).transition == "resolved"
    fired, reminder, resolved = alert_events_rows(engine)
    assert [r.json()["notification"] for r in hook.requests] == ["fired", "resolved"]
    assert reminder.delivery_status == "superseded" and reminder.superseded_by == resolved.id
    assert deliveries(engine)[(reminder.id, "webhook")][0] == "superseded"


def test_a_notification_committed_but_never_sent_goes_out_at_the_next_evaluation(engine, database_url):
    """The crash window itself: the outbox row is committed, nothing is sent."""
    with WebhookReceiver() as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url)
        add_results(engine, not_passed=20)
        rule = next(r for r in all_rules(settings) if r.name == "toxicity_rate")
        decision = evaluate_rule(engine, rule, channels=configured_channels(settings))
        assert decision.transition == "fired" and hook.requests == []
        assert alert_row(engine).delivery_status == "pending"

        result = toxicity(evaluate_rules(settings, engine=engine))
        assert result.transition is None
        assert hook.ids() == [decision.delivery_id]
        assert alert_row(engine).delivery_status == "delivered"


def test_a_process_killed_while_sending_is_made_good_by_the_next_evaluation(engine, database_url, tmp_path,
                                                                             prefect_server):
    """A real `judgeflow alerts check` is SIGKILLed after its commit, while the
    receiver holds its request unanswered; the next evaluation delivers."""
    add_results(engine, not_passed=20)
    with WebhookReceiver(script=[(60.0, 200)]) as hook:  # the first request hangs
        env = {
            **os.environ,
            "JUDGEFLOW_DATABASE_URL": database_url,
            "JUDGEFLOW_ALERT_WEBHOOK_URL": hook.url,
            "JUDGEFLOW_ALERT_WEBHOOK_TIMEOUT_S": "120",
            "JUDGEFLOW_ALERT_PREFECT_EVENTS": "false",
            "JUDGEFLOW_ALERT_MIN_SAMPLES": "10",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_API_URL": prefect_server,  # the runs' Prefect server: `alerts check` starts none of its own
        }
        proc = subprocess.Popen(
            [sys.executable, "-c", "from judgeflow.cli import app; app(['alerts', 'check'])"],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            while not hook.requests and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert hook.requests, f"the check never sent: {proc.poll()} {proc.stdout.read() if proc.poll() is not None else ''}"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL

        [event] = alert_events_rows(engine)
        assert event.kind == "fired" and event.delivery_status == "pending"  # committed, never confirmed

        settings = make_settings(database_url, alert_webhook_url=hook.url)
        # the killed process's advisory lock goes with its connection; give the server a moment to notice
        deadline = time.monotonic() + 30
        result = toxicity(evaluate_rules(settings, engine=engine))
        while not result.redelivered and time.monotonic() < deadline:
            time.sleep(0.2)
            result = toxicity(evaluate_rules(settings, engine=engine))
        assert result.redelivered and result.redelivered[0]["status"] == "delivered"
        assert hook.ids() == [str(event.delivery_id)] * 2  # the same id: the receiver can drop the duplicate
        assert hook.requests[1].status == 200
        evaluate_rules(settings, engine=engine)
        assert len(hook.requests) == 2
    assert alert_row(engine).delivery_status == "delivered"
