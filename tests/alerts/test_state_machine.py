"""The per-rule state machine against the real database, with notifications
going to a real local webhook receiver."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from judgeflow.alerts import evaluate_rules
from judgeflow.db.alert_tables import alerts
from tests.alerts.helpers import add_results, alert_events_rows, alert_row, clear_results, make_settings


def by_rule(results):
    return {r.rule: r for r in results}


def test_crossing_fires_once_staying_above_is_quiet_dropping_below_resolves_once(engine, database_url, hook):
    settings = make_settings(database_url, alert_webhook_url=hook.url, toxicity_rate_max=0.05)

    # 20 scored, 1 toxic: 5% is not above the maximum
    add_results(engine, passed=19, not_passed=1)
    first = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
    assert (first.outcome, first.state, first.transition) == ("ok", "ok", None)
    assert first.value == pytest.approx(0.05)
    assert hook.requests == []

    # 30 scored, 11 toxic: fires, exactly one notification
    add_results(engine, passed=0, not_passed=10)
    fired = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
    assert (fired.state_before, fired.state, fired.transition) == ("ok", "firing", "fired")
    assert fired.delivery_status == "delivered"
    assert len(hook.requests) == 1
    body = hook.requests[0].json()
    assert body["event"] == "judgeflow.alert.fired"
    assert body["rule"] == "toxicity_rate" and body["state"] == "firing"
    assert body["rate"] == pytest.approx(11 / 30, abs=1e-6) and body["threshold"] == 0.05
    assert body["sample_size"] == 30 and body["window"] == "24h"

    # still above: quiet, however often it is evaluated
    for _ in range(3):
        again = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
        assert (again.state, again.transition) == ("firing", None)
    assert len(hook.requests) == 1

    # back below: one "resolved", then quiet
    add_results(engine, passed=300)
    resolved = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
    assert (resolved.state_before, resolved.state, resolved.transition) == ("firing", "ok", "resolved")
    evaluate_rules(settings, engine=engine)
    assert len(hook.requests) == 2
    assert hook.requests[1].json()["event"] == "judgeflow.alert.resolved"
    assert hook.requests[1].json()["state"] == "ok"

    row = alert_row(engine)
    assert row.state == "ok" and row.opened_at is not None and row.resolved_at > row.opened_at
    assert [(e.kind, e.state, e.delivery_status) for e in alert_events_rows(engine)] == [
        ("fired", "firing", "delivered"),
        ("resolved", "ok", "delivered"),
    ]


def test_not_enough_samples_neither_fires_nor_resolves(engine, database_url, hook):
    settings = make_settings(database_url, alert_webhook_url=hook.url, alert_min_samples=50)

    add_results(engine, not_passed=49)  # 100% toxic, but only 49 samples
    result = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
    assert (result.outcome, result.state, result.transition) == ("not_enough_data", "ok", None)
    assert result.sample_size == 49
    assert "not enough data" in result.summary
    assert hook.requests == []
    assert alert_row(engine).last_outcome == "not_enough_data"

    add_results(engine, not_passed=1)  # the 50th sample: fires
    assert by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"].transition == "fired"
    assert len(hook.requests) == 1

    # the window empties out (only old traces left): firing stays firing, quietly
    clear_results(engine)
    add_results(engine, passed=200, age=timedelta(days=3))
    result = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
    assert (result.outcome, result.state, result.transition) == ("not_enough_data", "firing", None)
    assert result.sample_size == 0 and result.value is None
    assert len(hook.requests) == 1


def test_failed_scorings_do_not_count_as_samples(engine, database_url, hook):
    settings = make_settings(database_url, alert_webhook_url=hook.url, alert_min_samples=10)
    add_results(engine, passed=5, not_passed=4, failed=30, skipped=30)
    result = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
    assert result.outcome == "not_enough_data"
    assert (result.sample_size, result.violations, result.failed_count) == (9, 4, 30)
    assert hook.requests == []


def test_renotify_after_the_interval(engine, database_url, hook):
    settings = make_settings(database_url, alert_webhook_url=hook.url, alert_renotify="1h")
    add_results(engine, passed=5, not_passed=10)
    assert by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"].transition == "fired"
    assert by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"].transition is None
    assert len(hook.requests) == 1

    # an hour and a bit later (moved in the database, not faked in code)
    with engine.begin() as conn:
        conn.execute(
            sa.update(alerts)
            .where(alerts.c.rule == "toxicity_rate")
            .values(last_notified_at=alerts.c.last_notified_at - timedelta(minutes=61))
        )
    reminder = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
    assert (reminder.state, reminder.transition) == ("firing", "reminder")
    assert by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"].transition is None
    assert len(hook.requests) == 2
    body = hook.requests[1].json()
    assert body["event"] == "judgeflow.alert.fired" and body["notification"] == "reminder"
    # the firing began at the first notification, not at the reminder
    assert body["opened_at"] == hook.requests[0].json()["opened_at"]


def test_without_renotify_a_firing_rule_never_repeats(engine, database_url, hook):
    settings = make_settings(database_url, alert_webhook_url=hook.url)
    add_results(engine, not_passed=20)
    evaluate_rules(settings, engine=engine)
    with engine.begin() as conn:
        conn.execute(sa.update(alerts).values(last_notified_at=alerts.c.last_notified_at - timedelta(days=30)))
    assert by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"].transition is None
    assert len(hook.requests) == 1


def test_window_is_by_trace_created_at(engine, database_url, hook):
    settings = make_settings(database_url, alert_webhook_url=hook.url, alert_window="6h")
    add_results(engine, not_passed=50, age=timedelta(hours=7))  # outside the 6h window
    add_results(engine, passed=20, age=timedelta(hours=5))
    result = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
    assert (result.sample_size, result.violations, result.value) == (20, 0, 0.0)
    assert result.state == "ok" and hook.requests == []

    wide = make_settings(database_url, alert_webhook_url=hook.url, alert_window="1d")
    result = by_rule(evaluate_rules(wide, engine=engine))["toxicity_rate"]
    assert result.sample_size == 70 and result.transition == "fired"
    assert hook.requests[0].json()["window"] == "1d"


def test_hallucination_rule_is_the_same_mechanism(engine, database_url, hook):
    settings = make_settings(database_url, alert_webhook_url=hook.url, hallucination_rate_max=0.2)
    add_results(engine, "toxicity", passed=50)
    add_results(engine, "hallucination", passed=7, not_passed=3)
    results = by_rule(evaluate_rules(settings, engine=engine))
    assert results["toxicity_rate"].state == "ok"
    hall = results["hallucination_rate"]
    assert (hall.value, hall.sample_size, hall.transition) == (pytest.approx(0.3), 10, "fired")
    assert [r.json()["rule"] for r in hook.requests] == ["hallucination_rate"]
    assert hook.requests[0].json()["metric"] == "hallucination"


def test_judge_failure_rate_rule(engine, database_url, hook):
    settings = make_settings(database_url, alert_webhook_url=hook.url, failure_rate_max=0.1, toxicity_rate_max=None)
    add_results(engine, "toxicity", passed=8, failed=2, skipped=40)
    add_results(engine, "hallucination", passed=8, failed=2)
    result = by_rule(evaluate_rules(settings, engine=engine))["judge_failure_rate"]
    # failed / (scored + failed), all metrics; skipped is neither
    assert (result.violations, result.sample_size, result.value) == (4, 20, pytest.approx(0.2))
    assert result.transition == "fired"
    body = hook.requests[0].json()
    assert body["rule"] == "judge_failure_rate" and body["metric"] is None
    assert len(body["worst_traces"]) == 4
    assert all(w["reason"] == "judge_error: judge timed out" for w in body["worst_traces"])


def test_disabled_rules_are_skipped(engine, database_url, hook):
    settings = make_settings(
        database_url, alert_webhook_url=hook.url,
        toxicity_rate_max=None, hallucination_rate_max=None, failure_rate_max=None, dead_delivery_rate_max=None,
        toxicity_session_rate_max=None,
    )
    add_results(engine, "toxicity", not_passed=100, failed=100)
    add_results(engine, "hallucination", not_passed=100)
    assert evaluate_rules(settings, engine=engine) == []
    assert hook.requests == []
    assert alert_row(engine, "toxicity_rate") is None
    everything = evaluate_rules(settings, engine=engine, include_disabled=True)
    assert [(r.rule, r.enabled, r.summary) for r in everything] == [
        ("toxicity_rate", False, "disabled"),
        ("toxicity_session_rate", False, "disabled"),
        ("hallucination_rate", False, "disabled"),
        ("hallucination_session_rate", False, "disabled"),
        ("judge_failure_rate", False, "disabled"),
        ("toxicity_regression", False, "disabled"),
        ("toxicity_session_regression", False, "disabled"),
        ("hallucination_regression", False, "disabled"),
        ("hallucination_session_regression", False, "disabled"),
        ("phoenix_unwritten", False, "disabled"),  # off: not a Phoenix source writing back
        ("dead_delivery_rate", False, "disabled"),  # evaluated after the others' deliveries
    ]
    # by default toxicity (per trace and per session) and dead deliveries are on
    default = make_settings(database_url, alert_webhook_url=hook.url)
    assert [r.rule for r in evaluate_rules(default, engine=engine)] == [
        "toxicity_rate", "toxicity_session_rate", "dead_delivery_rate"]


def test_no_channels_configured_is_recorded_as_skipped(engine, database_url):
    settings = make_settings(database_url)
    add_results(engine, not_passed=20)
    result = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
    assert result.transition == "fired" and result.delivery_status == "skipped"
    assert alert_row(engine).delivery_status == "skipped"
