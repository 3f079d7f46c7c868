"""Evaluators running at the same time send one notification: the rule's row
lock serialises them and the second sees the state the first committed."""

from __future__ import annotations

import threading
import time

import sqlalchemy as sa

from judgeflow.alerts import evaluate_rules
from judgeflow.db.alert_tables import alerts
from tests.alerts.helpers import add_results, alert_events_rows, make_settings, migrated
from tests.support.webhook_receiver import WebhookReceiver

EVALUATORS = 8


def run_together(settings, database_url, n=EVALUATORS):
    """n threads, each with its own engine (its own connections), released at once."""
    barrier = threading.Barrier(n)
    results, errors = [], []
    engines = [sa.create_engine(database_url) for _ in range(n)]

    def evaluate(engine):
        try:
            barrier.wait(timeout=10)
            results.append(evaluate_rules(settings, engine=engine))
        except Exception as error:  # pragma: no cover - surfaced below
            errors.append(error)

    threads = [threading.Thread(target=evaluate, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for e in engines:
        e.dispose()
    assert not errors, errors
    return [r for batch in results for r in batch if r.rule == "toxicity_rate"]


def test_concurrent_evaluation_sends_one_notification(db, database_url):
    engine = migrated(db)
    add_results(engine, not_passed=30)
    with WebhookReceiver() as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url)
        fired = run_together(settings, database_url)
        assert len(hook.requests) == 1
        assert sorted(r.transition or "-" for r in fired) == ["-"] * (EVALUATORS - 1) + ["fired"]

        # and the same for resolving
        add_results(engine, passed=1000)
        resolved = run_together(settings, database_url)
        assert len(hook.requests) == 2
        assert sorted(r.transition or "-" for r in resolved) == ["-"] * (EVALUATORS - 1) + ["resolved"]
    assert [e.kind for e in alert_events_rows(engine)] == ["fired", "resolved"]


def test_an_evaluator_waits_for_the_rules_row_lock(db, database_url):
    engine = migrated(db)
    add_results(engine, not_passed=30)
    with WebhookReceiver() as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url)
        evaluate_rules(settings, engine=engine)  # creates the row, fires
        add_results(engine, passed=1000)
        done = threading.Event()

        with engine.connect() as holder:
            holder.execute(sa.select(alerts).where(alerts.c.rule == "toxicity_rate").with_for_update())
            worker = threading.Thread(target=lambda: (evaluate_rules(settings, engine=engine), done.set()))
            worker.start()
            time.sleep(0.5)
            assert not done.is_set(), "the evaluator did not wait for the lock"
            holder.rollback()
        worker.join(timeout=10)
        assert done.is_set()
        assert [r.json()["event"] for r in hook.requests] == ["judgeflow.alert.fired", "judgeflow.alert.resolved"]
