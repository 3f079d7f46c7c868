"""Alerts as Prefect events, read back from a real Prefect server, and the
automation in docs/alerts.md working end to end on that server."""

from __future__ import annotations

import re
import time
from pathlib import Path
from uuid import UUID

import pytest
import sqlalchemy as sa
import yaml

from judgeflow.alerts import evaluate_rules
from judgeflow.alerts.notify import Notifier, prefect_api_available
from tests.alerts.helpers import add_results, make_settings, migrated
from tests.support.webhook_receiver import WebhookReceiver

DOCS = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"
PLACEHOLDER = "00000000-0000-0000-0000-000000000000"


def read_event(event_id: str, timeout: float = 20.0):
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventIDFilter

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            # the API refuses limit > 50 in 3.8.8
            page = client.read_events(EventFilter(id=EventIDFilter(id=[UUID(event_id)])), limit=50)
            if page.events:
                return page.events[0]
            if time.monotonic() >= deadline:
                break
            time.sleep(0.25)
    raise AssertionError(f"event {event_id} never reached the Prefect server")


def toxicity(results):
    return next(r for r in results if r.rule == "toxicity_rate")


def docs_automations() -> list[dict]:
    text = DOCS.read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    [block] = [b for b in blocks if b.startswith("automations:")]
    return yaml.safe_load(block)["automations"]


def test_fired_and_resolved_events_reach_the_prefect_server(prefect_server, db, database_url):
    engine = migrated(db)
    settings = make_settings(database_url, alert_prefect_events=True)
    add_results(engine, passed=15, not_passed=5, failed=2)
    fired = toxicity(evaluate_rules(settings, engine=engine, flow_run_id="run-1"))
    assert fired.deliveries["prefect_event"]["status"] == "delivered"
    # delivered means the API has it: readable at once, no waiting for the server's writer
    event = read_event(fired.deliveries["prefect_event"]["detail"], timeout=0)
    add_results(engine, passed=500)
    resolved = toxicity(evaluate_rules(settings, engine=engine))

    assert event.event == "judgeflow.alert.fired"
    assert event.resource.id == "judgeflow.rule.toxicity_rate"
    assert event.resource.get("prefect.resource.name") == "toxicity_rate"
    assert event.resource.get("judgeflow.metric") == "toxicity"
    assert event.payload["rate"] == pytest.approx(0.25)
    assert (event.payload["threshold"], event.payload["sample_size"], event.payload["failed_count"]) == (0.05, 20, 2)
    assert event.payload["flow_run_id"] == "run-1" and len(event.payload["worst_traces"]) == 5

    event = read_event(resolved.deliveries["prefect_event"]["detail"], timeout=0)
    assert event.event == "judgeflow.alert.resolved"
    assert event.payload["state"] == "ok" and event.resource.id == "judgeflow.rule.toxicity_rate"


def test_the_docs_automation_is_valid_and_works(prefect_server, db, database_url):
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.client.orchestration import get_client
    from prefect.events.schemas.automations import AutomationCore

    definitions = docs_automations()
    assert [d["name"] for d in definitions] == ["judgeflow alert fired", "judgeflow alert resolved"]
    for definition in definitions:  # as `prefect automation create --from-file` reads them
        AutomationCore.model_validate(definition)

    engine = migrated(db)
    with WebhookReceiver() as pager:
        # a notification block delivering to the local receiver stands in for Slack
        block_id = CustomWebhookNotificationBlock(
            name="judgeflow-test-pager", url=pager.url, json_data={"subject": "{{subject}}", "body": "{{body}}"}
        ).save("judgeflow-test-pager", overwrite=True)
        created = []
        with get_client(sync_client=True) as client:
            for definition in definitions:
                for action in definition["actions"]:
                    assert action["block_document_id"] == PLACEHOLDER
                    action["block_document_id"] = str(block_id)
                created.append(client.create_automation(AutomationCore.model_validate(definition)))
        try:
            time.sleep(0.5)  # the server's trigger cache picks the new automations up
            settings = make_settings(database_url, alert_prefect_events=True)
            add_results(engine, passed=15, not_passed=5, reason="calls the user names")
            evaluate_rules(settings, engine=engine, flow_run_id="run-42")
            fired = wait_for(pager, 1)
            assert fired["subject"] == "judgeflow alert firing: toxicity_rate"
            assert fired["body"].startswith(
                "toxicity_rate is 25.0%, above the maximum 5.0% over the last 24h (20 results, 0 failed scorings)."
            )
            assert "calls the user names" in fired["body"] and "Flow run: run-42" in fired["body"]

            add_results(engine, passed=500)
            evaluate_rules(settings, engine=engine)
            resolved = wait_for(pager, 2)
            assert resolved["subject"] == "judgeflow alert resolved: toxicity_rate"
            assert resolved["body"].startswith("toxicity_rate is back to 1.0% (maximum 5.0%) over the last 24h.")
        finally:
            with get_client(sync_client=True) as client:
                for automation_id in created:
                    client.delete_automation(automation_id)


def wait_for(receiver: WebhookReceiver, n: int, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(receiver.requests) >= n:
            return receiver.requests[n - 1].json()
        time.sleep(0.1)
    raise AssertionError(f"the automation sent {len(receiver.requests)} notification(s), expected {n}")


def test_event_content_through_the_emitter_seam(db, database_url):
    engine = migrated(db)
    sent = []

    class Sent:
        id = "evt-1"

    def emitter(**kwargs):
        sent.append(kwargs)
        return Sent()

    def confirmer(ids, deadline):
        return set(ids)  # what the Prefect API answers when it has them

    settings = make_settings(database_url, alert_prefect_events=True, hallucination_rate_max=0.1)
    add_results(engine, "hallucination", passed=5, not_passed=5)
    results = evaluate_rules(
        settings, engine=engine, notifier=Notifier(settings, emitter=emitter, confirmer=confirmer)
    )
    [call] = sent
    assert call["event"] == "judgeflow.alert.fired"
    assert call["resource"] == {
        "prefect.resource.id": "judgeflow.rule.hallucination_rate",
        "prefect.resource.name": "hallucination_rate",
        "judgeflow.state": "firing",
        "judgeflow.rule": "hallucination_rate",
        "judgeflow.metric": "hallucination",
    }
    assert call["payload"]["rate"] == 0.5 and call["payload"]["rule"] == "hallucination_rate"
    hall = next(r for r in results if r.rule == "hallucination_rate")
    assert hall.deliveries["prefect_event"] == {
        "status": "delivered", "attempts": 1, "tries": 1, "http_status": None, "error": None, "detail": "evt-1",
    }
    # the event's id is the notification's delivery id: a re-sent event is the same event
    assert str(call["id"]) == call["payload"]["delivery_id"] == hall.delivery_id


def test_events_stay_pending_without_a_prefect_api_and_go_out_with_one(prefect_server, db, database_url):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    engine = migrated(db)
    settings = make_settings(database_url, alert_prefect_events=True)
    add_results(engine, not_passed=20)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert not prefect_api_available()
        # `judgeflow alerts check` where no Prefect API is configured: nothing tried, nothing given up
        result = toxicity(evaluate_rules(settings, engine=engine))
        again = toxicity(evaluate_rules(settings, engine=engine, redeliver_now=True))
    view = result.deliveries["prefect_event"]
    assert (view["status"], view["tries"], view["attempts"]) == ("pending", 0, 0)
    assert result.delivery_status == "pending"
    assert [r["status"] for r in again.redelivered] == ["deferred"]
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT status, tries FROM judgeflow.alert_deliveries")).one() == ("pending", 0)

    # the next evaluation with an API (a scoring run) delivers it
    later = toxicity(evaluate_rules(settings, engine=engine))
    [redelivered] = later.redelivered
    assert (redelivered["channel"], redelivered["status"]) == ("prefect_event", "delivered")
    read_event(result.delivery_id, timeout=0)


def test_an_event_queued_but_never_stored_is_not_delivered(prefect_server, db, database_url):
    """emit_event only queues an event: until the API returns it, it is not delivered."""
    engine = migrated(db)
    settings = make_settings(database_url, alert_prefect_events=True, alert_event_confirm_timeout_s=1.0)
    add_results(engine, not_passed=20)

    class Queued:  # what emit_event returns: the event, whether or not it ever reaches the API
        def __init__(self, id):
            self.id = id

    lost = Notifier(settings, emitter=lambda **kw: Queued(kw["id"]))  # the event is lost on the way
    result = toxicity(evaluate_rules(settings, engine=engine, notifier=lost))
    view = result.deliveries["prefect_event"]
    assert (view["status"], view["tries"], view["attempts"]) == ("failed", 1, 1)
    assert "had not stored it" in view["error"]
    assert result.delivery_status == "failed"

    # emitted again with the same id by the next evaluation, and delivered once the API has it
    later = toxicity(evaluate_rules(settings, engine=engine))
    assert [(r["status"], r["tries"]) for r in later.redelivered] == [("delivered", 2)]
    assert read_event(result.delivery_id, timeout=0).event == "judgeflow.alert.fired"


def test_events_can_be_turned_off(db, database_url):
    engine = migrated(db)
    sent = []
    settings = make_settings(database_url, alert_prefect_events=False)
    add_results(engine, not_passed=20)
    evaluate_rules(settings, engine=engine, notifier=Notifier(settings, emitter=lambda **kw: sent.append(kw)))
    assert sent == []
