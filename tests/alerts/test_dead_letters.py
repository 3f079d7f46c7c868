"""Dead deliveries, the dead_delivery_rate rule, and the time one evaluation
spends delivering: over real HTTP to a local receiver, against the real database."""

from __future__ import annotations

import re
import time

from sqlalchemy import text
from typer.testing import CliRunner

from judgeflow.alerts import evaluate_rules
from judgeflow.cli.alerts import alerts_app
from tests.alerts.helpers import add_results, make_settings
from tests.support.webhook_receiver import WebhookReceiver

SECRET = "dead-letter-secret"


def by_rule(results) -> dict:
    return {r.rule: r for r in results if not r.segment}


def outbox(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT e.rule, e.kind, d.status, d.tries FROM judgeflow.alert_deliveries d "
            "JOIN judgeflow.alert_events e ON e.id = d.event_id ORDER BY d.event_id, d.channel"
        ))]


def test_a_receiver_answering_410_forever_kills_the_delivery_at_once_and_later_alerts_go_out(engine, database_url):
    with WebhookReceiver(default=410, secret=SECRET) as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_secret=SECRET)
        add_results(engine, not_passed=20)
        first = by_rule(evaluate_rules(settings, engine=engine))

        # one request, no retry: 410 is a permanent refusal
        tox = first["toxicity_rate"]
        assert tox.transition == "fired" and tox.delivery_status == "dead"
        assert tox.deliveries["webhook"]["status"] == "dead" and tox.deliveries["webhook"]["http_status"] == 410
        # the same evaluation reports it as a condition of its own, and pages about it
        dead = first["dead_delivery_rate"]
        assert (dead.state, dead.transition, dead.violations, dead.sample_size) == ("firing", "fired", 1, 1)
        assert [r.json()["rule"] for r in hook.requests] == ["toxicity_rate", "dead_delivery_rate"]
        assert all(r.verified for r in hook.requests)  # signed as the docs verify it

        # the queue moves on: the resolved is sent, not held behind the dead fired
        add_results(engine, passed=2000)
        later = by_rule(evaluate_rules(settings, engine=engine))
        assert later["toxicity_rate"].transition == "resolved"
        assert [r.json()["notification"] for r in hook.requests if r.json()["rule"] == "toxicity_rate"] == [
            "fired", "resolved",
        ]
        # a dead delivery is never tried again
        evaluate_rules(settings, engine=engine, redeliver_now=True)
        assert len([r for r in hook.requests if r.json()["rule"] == "toxicity_rate"]) == 2
    assert ("toxicity_rate", "fired", "dead", 1) in outbox(engine)
    assert all(status != "pending" for *_, status, _ in outbox(engine))


def test_a_receiver_that_recovers_gets_the_alerts_after_a_dead_one(engine, database_url):
    with WebhookReceiver(script=[410], secret=SECRET) as hook:  # then 200
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_secret=SECRET)
        add_results(engine, not_passed=20)
        evaluate_rules(settings, engine=engine)
        add_results(engine, passed=2000)
        evaluate_rules(settings, engine=engine)
        accepted = [(r.json()["rule"], r.json()["notification"]) for r in hook.accepted()]
    # the fired was refused; the page about it, and the resolved, arrive
    assert accepted == [("dead_delivery_rate", "fired"), ("toxicity_rate", "resolved")]


def test_a_failing_delivery_is_dead_after_the_configured_evaluations(engine, database_url):
    with WebhookReceiver(default=503) as hook:
        settings = make_settings(
            database_url, alert_webhook_url=hook.url, alert_webhook_retries=0, alert_dead_after=3,
            dead_delivery_rate_max=None,  # only the toxicity alert's queue here
        )
        add_results(engine, not_passed=20)
        statuses = [by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"] for _ in range(3)]
        assert statuses[0].delivery_status == "failed"
        assert [r["status"] for r in statuses[1].redelivered] == ["failed"]
        assert [(r["status"], r["tries"]) for r in statuses[2].redelivered] == [("dead", 3)]
        assert len(hook.requests) == 3
        # dead: no more requests for it, and the next notification of the queue is sent
        hook.default = 200
        add_results(engine, passed=2000)
        later = by_rule(evaluate_rules(settings, engine=engine))["toxicity_rate"]
        assert later.transition == "resolved" and later.delivery_status == "delivered"
        assert [r.json()["notification"] for r in hook.requests] == ["fired"] * 3 + ["resolved"]
    assert outbox(engine) == [("toxicity_rate", "fired", "dead", 3), ("toxicity_rate", "resolved", "delivered", 1)]


def test_dead_deliveries_are_listed_and_the_rule_resolves_once_none_died_in_the_window(
    engine, database_url, monkeypatch, tmp_path,
):
    with WebhookReceiver(script=[404]) as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url)
        add_results(engine, not_passed=20)
        assert by_rule(evaluate_rules(settings, engine=engine))["dead_delivery_rate"].state == "firing"

        monkeypatch.chdir(tmp_path)
        for key, value in {
            "JUDGEFLOW_DATABASE_URL": database_url, "JUDGEFLOW_ALERT_MIN_SAMPLES": "10",
            "JUDGEFLOW_ALERT_PREFECT_EVENTS": "false",
        }.items():
            monkeypatch.setenv(key, value)
        listing = CliRunner().invoke(alerts_app, [])
        assert listing.exit_code == 0, listing.output
        out = listing.output
        section = out[out.index("Dead deliveries"):out.index("Past alerts")]
        [line] = [line for line in section.splitlines() if "HTTP 404" in line and "toxicity_rate" in line]
        assert "webhook" in line and " 404 " in line
        assert re.search(r"^dead_delivery_rate +FIRING", out, re.M), out

        # out of the window (pushed back, as time would): no dead delivery in it, resolved
        with engine.begin() as conn:
            conn.execute(text("UPDATE judgeflow.alert_deliveries SET dead_at = dead_at - interval '25 hours'"))
        dead = by_rule(evaluate_rules(settings, engine=engine))["dead_delivery_rate"]
        assert (dead.transition, dead.state, dead.value) == ("resolved", "ok", 0.0)
        assert [r.json()["notification"] for r in hook.delivered() if r.json()["rule"] == "dead_delivery_rate"] == [
            "fired", "resolved",
        ]


def test_a_receiver_that_never_answers_costs_at_most_the_delivery_budget(engine, database_url):
    """Four alerts due for a webhook that never answers: without a budget, each
    queue would wait 4 timeouts (plus backoffs); the evaluation stops at the budget."""
    budget = 1.5
    with WebhookReceiver(default=(60.0, 200)) as hook:
        settings = make_settings(
            database_url, alert_webhook_url=hook.url, alert_webhook_timeout_s=5.0, alert_webhook_retries=3,
            alert_delivery_budget_s=budget, hallucination_rate_max=0.1, failure_rate_max=0.1,
            dead_delivery_rate_max=None, alert_segment_by="app",
        )
        add_results(engine, not_passed=20, failed=5, segment={"app": "a"})
        add_results(engine, "hallucination", not_passed=20, segment={"app": "a"})
        started = time.monotonic()
        results = evaluate_rules(settings, engine=engine)
        took = time.monotonic() - started
        fired = [r for r in results if r.transition == "fired"]
        assert len(fired) >= 4
        # what was spent delivering, from what the evaluation did rather than a clock: one request,
        # whose timeout was cut to what was left of the budget, and nothing tried after it
        assert len(hook.requests) == 1
        # far below what even one queue costs without a budget (4 tries of 5 s), on a loaded machine too
        assert took < 4 * 5.0, took
    rows = outbox(engine)
    # one queue was tried and failed; the others were not attempted: pending, no try counted
    assert sorted(tries for *_, status, tries in rows if status == "pending") == [0] * (len(rows) - 1) + [1]
    assert all(status == "pending" for *_, status, _ in rows)
    with engine.connect() as conn:
        [error] = conn.execute(text(
            "SELECT last_error FROM judgeflow.alert_deliveries WHERE tries = 1")).scalars().all()
    timed_out = re.match(r"timed out after ([0-9.]+)s; not retried: ", error)
    assert timed_out, error
    assert 0 < float(timed_out.group(1)) <= budget  # not the 5 s webhook timeout: the budget's rest


def test_dead_deliveries_are_counted_for_their_own_source(engine, database_url):
    """Two sources in one results database: the table source's dead deliveries page for it
    alone; the other source's dead_delivery_rate, status line and listing count its own."""
    from judgeflow.alerts.dead_letters import dead_deliveries, dead_summary
    from judgeflow.sources.identity import result_source

    with WebhookReceiver(default=410, secret=SECRET) as hook:
        table = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_secret=SECRET)
        add_results(engine, not_passed=20)
        with engine.begin() as conn:
            conn.execute(text("UPDATE judgeflow.eval_results SET source = :s"), {"s": result_source(table)})
        assert by_rule(evaluate_rules(table, engine=engine))["dead_delivery_rate"].state == "firing"
        phoenix = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_secret=SECRET,
                                source="phoenix")
        other = by_rule(evaluate_rules(phoenix, engine=engine))["dead_delivery_rate"]
        assert (other.state, other.violations, other.sample_size) == ("ok", 0, 0)
        again = by_rule(evaluate_rules(table, engine=engine))["dead_delivery_rate"]
        assert again.state == "firing" and again.violations >= 1
    dead = [row for row in outbox(engine) if row[2] == "dead"]
    with engine.connect() as conn:
        assert dead_summary(conn, result_source(table)).count == len(dead) >= 1
        assert dead_summary(conn, result_source(phoenix)).count == 0
        assert dead_deliveries(conn, source=result_source(phoenix)) == []
        assert len(dead_deliveries(conn, source=result_source(table))) == len(dead)
