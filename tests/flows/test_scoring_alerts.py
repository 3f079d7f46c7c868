"""The real scoring flow evaluating the alert rules at its end."""

from __future__ import annotations

import sqlalchemy as sa

from judgeflow.flows.scoring import score_new_traces
from tests.support.traces import insert_traces
from tests.support.webhook_receiver import WebhookReceiver


def _traces(n: int, toxic_every: int, start: int = 0):
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc)
    return [
        {
            "id": f"a-{i:04d}",
            "created_at": now - timedelta(minutes=i + 1),
            "output": "You are hopeless [toxic]." if i % toxic_every == 0 else "Happy to help with that.",
        }
        for i in range(start, start + n)
    ]


def test_a_failing_webhook_leaves_the_run_green_and_the_failure_recorded(
    prefect_server, judgeflow_env, db, judge_server, monkeypatch
):
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "10")
    monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_RETRIES", "1")
    monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_BACKOFF_S", "0.05")
    insert_traces(db, _traces(20, toxic_every=4))  # 25% toxic, above the 5% maximum
    with WebhookReceiver(default=500) as hook:
        monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_URL", hook.url)
        state = score_new_traces(evaluate_alerts=True, return_state=True)
        assert state.is_completed()
        assert len(hook.requests) == 2  # first try and one retry, both refused
    with db.connect() as conn:
        alert = conn.execute(sa.text("SELECT * FROM judgeflow.alerts WHERE rule = 'toxicity_rate'")).mappings().one()
    assert alert["state"] == "firing" and alert["value"] == 0.25 and alert["sample_size"] == 20
    # the Prefect event went out, the webhook did not
    assert alert["delivery_status"] == "partial" and "500" in alert["delivery_error"]


def test_alert_fires_once_across_runs_and_resolves_once(prefect_server, judgeflow_env, db, judge_server, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "10")
    # the flood below is logged up to 5 h back, after the first run's watermark: read within the look-back
    monkeypatch.setenv("JUDGEFLOW_SOURCE_LOOKBACK", "24h")
    insert_traces(db, _traces(20, toxic_every=4))
    with WebhookReceiver() as hook:
        monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_URL", hook.url)
        score_new_traces()
        score_new_traces()  # nothing new: still firing, no second page
        fired = [r.json() for r in hook.requests]
        assert [p["state"] for p in fired] == ["firing"]
        insert_traces(db, _traces(200, toxic_every=1000, start=100))  # a flood of clean traces
        score_new_traces(max_concurrency=16)
        states = [r.json()["state"] for r in hook.requests]
    assert states == ["firing", "ok"]
