"""Webhook and Slack delivery over real HTTP to a local receiver: retries,
failure recording, the HMAC signature, the payload's content."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import uuid

import pytest
import sqlalchemy as sa

from judgeflow.alerts import evaluate_rules
from judgeflow.alerts.notify import (
    DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign, slack_message, verify_signature,
)
from tests.alerts.helpers import add_results, alert_events_rows, alert_row, make_settings
from tests.support.webhook_receiver import WebhookReceiver

SECRET = "s3cret-for-tests"
ID = "0b7c2f4e-9a51-4c1e-8f0d-2a6b3c4d5e6f"


def toxicity(results):
    return next(r for r in results if r.rule == "toxicity_rate")


def test_500_twice_then_200_gets_the_alert(engine, database_url):
    with WebhookReceiver(script=[500, 500, 200]) as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_retries=3)
        add_results(engine, not_passed=20)
        result = toxicity(evaluate_rules(settings, engine=engine))

    assert [r.status for r in hook.requests] == [500, 500, 200]
    assert len(hook.delivered()) == 1
    # the same delivery id on every retry, so a receiver can de-duplicate
    assert len({r.header("X-Judgeflow-Delivery") for r in hook.requests}) == 1
    assert result.delivery_status == "delivered"
    assert result.deliveries["webhook"]["attempts"] == 3
    row = alert_row(engine)
    assert (row.delivery_status, row.delivery_attempts, row.delivery_error) == ("delivered", 3, None)
    assert row.delivered_at is not None


def test_timeout_is_retried(engine, database_url):
    # the first request is answered long after the timeout; the retry at once, well within 1.5 s on a
    # loaded machine too (a 0.2 s timeout could time the answered retry out as well)
    with WebhookReceiver(script=[(30.0, 200), 200]) as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_timeout_s=1.5)
        add_results(engine, not_passed=20)
        result = toxicity(evaluate_rules(settings, engine=engine))
    assert len(hook.requests) == 2
    assert result.delivery_status == "delivered"
    assert result.deliveries["webhook"]["attempts"] == 2


def test_always_failing_receiver_is_recorded_and_not_raised(engine, database_url):
    with WebhookReceiver(default=503) as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_retries=2)
        add_results(engine, not_passed=20)
        result = toxicity(evaluate_rules(settings, engine=engine))  # does not raise
        assert len(hook.requests) == 3  # 1 + 2 retries, then it gives up

        assert result.state == "firing" and result.delivery_status == "failed"
        assert "HTTP 503" in result.delivery_error
        row = alert_row(engine)
        assert row.state == "firing"
        assert (row.delivery_status, row.delivery_attempts) == ("failed", 3)
        assert row.delivered_at is None and "webhook: HTTP 503" in row.delivery_error
        [event] = alert_events_rows(engine)
        assert event.delivery_status == "failed" and event.deliveries["webhook"]["http_status"] == 503

        # it stays in the outbox: the next evaluation sends it again, with the same delivery id
        again = toxicity(evaluate_rules(settings, engine=engine))
        assert len(hook.requests) == 6
        assert len({r.header("X-Judgeflow-Delivery") for r in hook.requests}) == 1
        assert again.transition is None
        assert again.redelivered == [{
            "alert_id": event.id, "notification": "fired", "channel": "webhook", "status": "failed", "tries": 2,
            "error": 'HTTP 503: {"error": "scripted failure"}',
        }]
        assert alert_row(engine).delivery_attempts == 6

        # with a redelivery backoff, an evaluation right after a failed one leaves it alone
        patient = make_settings(
            database_url, alert_webhook_url=hook.url, alert_webhook_retries=2, alert_redelivery_backoff_s=600
        )
        assert toxicity(evaluate_rules(patient, engine=engine)).redelivered[0]["tries"] == 3
        assert len(hook.requests) == 9
        assert toxicity(evaluate_rules(patient, engine=engine)).redelivered == []
        assert len(hook.requests) == 9


def test_client_errors_are_not_retried(engine, database_url):
    with WebhookReceiver(default=400) as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url)
        add_results(engine, not_passed=20)
        result = toxicity(evaluate_rules(settings, engine=engine))
    # not retried, and dead at once (a permanent refusal); the second request is the
    # dead_delivery_rate rule's own alert about it, refused too
    assert [r.json()["rule"] for r in hook.requests] == ["toxicity_rate", "dead_delivery_rate"]
    assert result.delivery_status == "dead" and result.delivery_error.startswith("webhook: HTTP 400")


def test_unreachable_receiver_is_recorded(engine, database_url):
    with WebhookReceiver() as hook:
        url = hook.url
    # the receiver is gone: connection refused on every attempt
    settings = make_settings(database_url, alert_webhook_url=url, alert_webhook_retries=1)
    add_results(engine, not_passed=20)
    result = toxicity(evaluate_rules(settings, engine=engine))
    assert result.delivery_status == "failed"
    assert result.deliveries["webhook"]["attempts"] == 2
    assert alert_row(engine).delivery_status == "failed"


def test_hmac_signature_verifies_with_the_secret(engine, database_url):
    with WebhookReceiver() as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_secret=SECRET)
        add_results(engine, not_passed=20)
        evaluate_rules(settings, engine=engine)
    [request] = hook.requests
    timestamp = request.header(TIMESTAMP_HEADER)
    signature = request.header(SIGNATURE_HEADER)
    delivery_id = request.header(DELIVERY_HEADER)
    assert signature.startswith("sha256=")
    assert abs(int(timestamp) - time.time()) < 60
    assert delivery_id == request.json()["delivery_id"]

    # what a receiver computes, with nothing but the stdlib: timestamp, delivery id, body
    message = timestamp.encode() + b"." + delivery_id.encode() + b"." + request.body
    expected = hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(signature, f"sha256={expected}")
    assert verify_signature(SECRET, timestamp, request.body, signature, delivery_id=delivery_id)
    assert not verify_signature("wrong-secret", timestamp, request.body, signature, delivery_id=delivery_id)
    assert not verify_signature(
        SECRET, timestamp, request.body.replace(b"firing", b"ok"), signature, delivery_id=delivery_id
    )
    assert not verify_signature(SECRET, str(int(timestamp) - 3600), request.body, signature, delivery_id=delivery_id)
    # the delivery id receivers de-duplicate on is signed: a replay under another id fails
    other = str(uuid.uuid4())
    assert not verify_signature(SECRET, timestamp, request.body, signature, delivery_id=other)
    assert not verify_signature(SECRET, timestamp, request.body, signature, delivery_id=delivery_id[:-1] + "0"
                                if not delivery_id.endswith("0") else delivery_id[:-1] + "1")
    # nor can bytes move between the id and the body
    assert not verify_signature(
        SECRET, timestamp, request.body[1:], signature, delivery_id=delivery_id + "." + request.body[:1].decode()
    )


def test_unsigned_without_a_secret(engine, database_url):
    with WebhookReceiver() as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url)
        add_results(engine, not_passed=20)
        evaluate_rules(settings, engine=engine)
    assert hook.requests[0].header(SIGNATURE_HEADER) is None
    assert hook.requests[0].header(TIMESTAMP_HEADER) is not None


def test_payload_carries_figures_and_the_five_worst_traces_without_texts(engine, database_url):
    long_reason = "The output insults the user. " * 40
    with WebhookReceiver() as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url)
        add_results(engine, passed=10)
        bad = add_results(engine, not_passed=8, scores=[0.6, 0.99, 0.7, 0.95, 0.8, 0.65, 0.9, 0.75], reason=long_reason)
        add_results(engine, failed=3)
        evaluate_rules(settings, engine=engine, flow_run_id="0b5f6b1c-run")
    body = hook.requests[0].json()
    assert hook.requests[0].header("X-Judgeflow-Event") == "judgeflow.alert.fired"
    assert body["rule"] == "toxicity_rate" and body["state"] == "firing" and body["notification"] == "fired"
    assert (body["sample_size"], body["violations"], body["failed_count"]) == (18, 8, 3)
    assert body["rate"] == pytest.approx(8 / 18, abs=1e-6)
    assert body["threshold"] == 0.05 and body["window"] == "24h" and body["min_samples"] == 10
    assert body["flow_run_id"] == "0b5f6b1c-run"
    assert body["opened_at"] and body["alert_id"] == alert_events_rows(engine)[0].id

    worst = body["worst_traces"]
    assert [w["score"] for w in worst] == [0.99, 0.95, 0.9, 0.8, 0.75]
    assert [w["trace_id"] for w in worst] == [bad[1], bad[3], bad[6], bad[4], bad[7]]
    assert set(worst[0]) == {"trace_id", "metric", "score", "reason", "trace_created_at"}
    assert all(len(w["reason"]) <= 300 for w in worst)
    # no trace texts anywhere
    assert "input" not in json.dumps(body) and "output\"" not in json.dumps(body)


def test_slack_gets_a_readable_message(engine, database_url):
    with WebhookReceiver() as slack, WebhookReceiver() as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_slack_webhook_url=slack.url)
        add_results(engine, passed=90, not_passed=10, reason="calls the user <an idiot> & worse")
        result = toxicity(evaluate_rules(settings, engine=engine))
        add_results(engine, passed=500)
        toxicity(evaluate_rules(settings, engine=engine))
    assert result.deliveries["slack"]["status"] == "delivered"
    fired, resolved = [r.json() for r in slack.requests]
    assert fired["text"].startswith(":rotating_light: *judgeflow alert firing: toxicity_rate*")
    assert "Toxicity rate 10.0% is above the maximum 5.0% over the last 24h (100 results)" in fired["text"]
    assert "&lt;an idiot&gt; &amp; worse" in fired["text"]
    assert fired["blocks"][0]["text"]["type"] == "mrkdwn"
    assert resolved["text"].startswith(":white_check_mark: *judgeflow alert resolved: toxicity_rate*")
    assert "is back at or below the maximum 5.0%" in resolved["text"]
    assert len(hook.requests) == 2


def test_slack_failure_alone_makes_a_partial_delivery(engine, database_url):
    with WebhookReceiver(default=500) as slack, WebhookReceiver() as hook:
        settings = make_settings(
            database_url, alert_webhook_url=hook.url, alert_slack_webhook_url=slack.url, alert_webhook_retries=1
        )
        add_results(engine, not_passed=20)
        result = toxicity(evaluate_rules(settings, engine=engine))
    assert result.delivery_status == "partial"
    assert result.delivery_error.startswith("slack: HTTP 500")
    assert alert_row(engine).delivery_status == "partial"


def test_slack_message_for_a_reminder_links_the_run():
    payload = {
        "rule": "judge_failure_rate", "notification": "reminder", "rate": 0.25, "threshold": 0.1, "window": "6h",
        "sample_size": 40, "failed_count": 10, "metric": None, "flow_run_id": "abc",
        "run_url": "http://prefect.local/runs/flow-run/abc",
        "worst_traces": [{"trace_id": "t1", "score": None, "reason": "judge_error: timeout"}],
    }
    text = slack_message(payload)["text"]
    assert "still firing: judge_failure_rate" in text
    assert "Judge failure rate 25.0% is above the maximum 10.0% over the last 6h (40 results)." in text
    assert "• `t1` judge_error: timeout" in text
    assert "<http://prefect.local/runs/flow-run/abc|abc>" in text


def test_sign_is_hmac_sha256_over_timestamp_delivery_id_and_body():
    body = b'{"rule":"toxicity_rate"}'
    assert sign("k", "1700000000", body, delivery_id=ID) == "sha256=" + hmac.new(
        b"k", b"1700000000." + ID.encode() + b"." + body, hashlib.sha256
    ).hexdigest()
    good = sign("k", "1700000000", body, delivery_id=ID)
    assert verify_signature("k", "1700000000", body, good, delivery_id=ID, tolerance_s=None)
    assert not verify_signature("k", "not-a-time", body, sign("k", "not-a-time", body, delivery_id=ID), delivery_id=ID)
    for altered in (ID.upper(), ID[:-1] + "0", "", None, 17, ID + "."):
        assert not verify_signature("k", "1700000000", body, good, delivery_id=altered, tolerance_s=None)


@pytest.mark.parametrize("timestamp", [
    "nan", "NaN", "inf", "-inf", "Infinity", "1e9", "1700000000.5", "-1700000000", " 1700000000", "1700000000\n",
    "", "0x10", "١٧٠٠٠٠٠٠٠٠",  # Arabic-Indic digits: int() would take them
])
def test_verifier_rejects_timestamps_that_are_not_whole_seconds(timestamp):
    body = b'{"rule":"toxicity_rate"}'
    signature = sign("k", timestamp, body, delivery_id=ID)  # correctly signed: only the timestamp is wrong
    assert verify_signature("k", timestamp, body, signature, delivery_id=ID, now=1700000000) is False
    assert verify_signature("k", timestamp, body, signature, delivery_id=ID, tolerance_s=None) is False


@pytest.mark.parametrize("signature", ["sha256=é", "sha256=" + "ä" * 64, "\u0000", None, b"sha256=00", 42])
def test_verifier_rejects_malformed_signatures_without_raising(signature):
    body = b"{}"
    assert verify_signature("k", "1700000000", body, signature, delivery_id=ID, now=1700000000) is False


def test_verifier_still_accepts_a_good_signature_and_rejects_odd_inputs():
    body = b'{"a":1}'
    good = sign("k", "1700000000", body, delivery_id=ID)
    assert verify_signature("k", "1700000000", body, good, delivery_id=ID, now=1700000100) is True
    assert verify_signature("k", "1700000000", body, good, delivery_id=ID, now=1700000301) is False  # stale
    assert verify_signature("k", "1700000000", "not bytes", good, delivery_id=ID, now=1700000000) is False
    assert verify_signature("k", "1700000000", body, good, delivery_id=ID, now=float("nan")) is False


class RecordedLogs(logging.Handler):
    """Every record the root logger handles, as formatted by the process's record factory."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _alerts_of_a_failing_run(settings, engine):
    """The end of a scoring run's alert work after 20 failing results, with the
    settings registered as every entry point does (load_settings): its state
    and every log record it emitted."""
    from judgeflow.config.scrub import register_settings
    from tests.tasks.test_alerting import end_of_scoring_run

    register_settings(settings)
    add_results(engine, not_passed=20)
    records = RecordedLogs()
    logging.getLogger().addHandler(records)
    try:
        return end_of_scoring_run(settings, return_state=True), records
    finally:
        logging.getLogger().removeHandler(records)


def test_a_token_in_a_slack_url_path_leaks_nowhere(prefect_server, engine, database_url):
    """A Slack-style URL holds its token in the path; a receiver echoes the path in its 404.
    The token is in no stored error, log record or artifact."""
    from judgeflow.db.alert_tables import alert_deliveries
    from judgeflow.tasks.alerting import ALERT_STATE_KEY
    from tests.tasks.test_alerting import read_artifact

    token = "xoxbTok3nInThePath9Qw7Zk2"
    with WebhookReceiver(default=404) as hook:
        url = hook.url_for(f"/services/T0A1B2C3D/B0E4F5G6H/{token}")
        settings = make_settings(database_url, alert_slack_webhook_url=url)
        state, records = _alerts_of_a_failing_run(settings, engine)
    assert state.is_completed(), state
    assert token in hook.requests[0].path  # sent, and echoed back in the 404
    with engine.connect() as conn:
        errors = [e for (e,) in conn.execute(sa.select(alert_deliveries.c.last_error)) if e]
    assert errors and all("HTTP 404" in e for e in errors)
    assert not [e for e in errors if token in e], errors
    logged = [r.getMessage() + (r.exc_text or "") for r in records.records]
    assert any("HTTP 404" in m for m in logged)
    assert not [m for m in logged if token in m]
    artifact = read_artifact(state.state_details.flow_run_id, ALERT_STATE_KEY)
    assert "HTTP 404" in artifact.data and token not in artifact.data
    assert "T0A1B2C3D" not in artifact.data + " ".join(errors)  # the other id segments of the path too


def test_a_webhook_whose_secret_is_a_plain_path_leaks_nowhere(prefect_server, engine, database_url):
    """A path token with no digit and under 16 characters ("/hooks/ourSecretHook"),
    echoed by the receiver's 404: in no stored error, log record or artifact."""
    from judgeflow.db.alert_tables import alert_deliveries
    from judgeflow.tasks.alerting import ALERT_STATE_KEY
    from tests.tasks.test_alerting import read_artifact

    with WebhookReceiver(default=404) as hook:
        url = hook.url_for("/hooks/ourSecretHook")
        settings = make_settings(database_url, alert_webhook_url=url)
        state, records = _alerts_of_a_failing_run(settings, engine)
    assert state.is_completed(), state
    assert hook.requests and hook.requests[0].path == "/hooks/ourSecretHook"
    with engine.connect() as conn:
        errors = [e for (e,) in conn.execute(sa.select(alert_deliveries.c.last_error)) if e]
    assert errors and all("HTTP 404" in e for e in errors)
    logged = [r.getMessage() + (r.exc_text or "") for r in records.records]
    artifact = read_artifact(state.state_details.flow_run_id, ALERT_STATE_KEY).data
    for text in [*errors, *logged, artifact]:
        assert "ourSecretHook" not in text and "/hooks/our" not in text, text


def test_a_transport_error_names_the_webhook_by_scheme_host_and_port_only():
    from judgeflow.config.scrub import origin, without_endpoint_path

    url = "https://hooks.example.com:8443/hooks/ourSecretHook?token=abc&team=x"
    text = ("ConnectError: all connection attempts failed for url "
            "'https://hooks.example.com:8443/hooks/ourSecretHook?token=abc&team=x'; "
            "redirected to https://hooks.example.com:8443/other/place?x=1; echoed /ourSecretHook and team=x")
    out = without_endpoint_path(text, url)
    assert "url 'https://hooks.example.com:8443';" in out and "redirected to https://hooks.example.com:8443 " in out
    assert "ourSecretHook" not in out and "token=abc" not in out and "/other/place" not in out
    assert "team=x" not in out
    assert origin("https://hooks.slack.com/services/T/B/X") == "https://hooks.slack.com:443"
    assert origin("http://[::1]:9/x") == "http://[::1]:9"
