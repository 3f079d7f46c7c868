"""The evaluate-alert-rules task inside a flow run on a real Prefect server."""

from __future__ import annotations

import pytest
from prefect import flow

from judgeflow.tasks.alerting import ALERT_STATE_KEY, evaluate_alert_rules
from tests.alerts.helpers import add_results, alert_events_rows, alert_row, make_settings, migrated
from tests.support.webhook_receiver import WebhookReceiver


@flow(name="alerting-test-run")
def end_of_scoring_run(settings, flow_run_id=None):
    """Stands in for the end of the scoring flow: it calls the task the same way."""
    return evaluate_alert_rules(settings, flow_run_id=flow_run_id)


def test_a_webhook_that_always_fails_leaves_the_run_green(prefect_server, db, database_url):
    engine = migrated(db)
    add_results(engine, passed=20, not_passed=10, failed=2)
    with WebhookReceiver(default=500) as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url, alert_webhook_retries=2)
        state = end_of_scoring_run(settings, return_state=True)
    assert state.is_completed(), state
    result, session, dead = state.result()
    assert (result.rule, result.state, result.transition) == ("toxicity_rate", "firing", "fired")
    assert (session.rule, session.outcome) == ("toxicity_session_rate", "not_enough_data")  # on by default
    assert (dead.rule, dead.state) == ("dead_delivery_rate", "ok")  # failing, not dead yet
    assert result.delivery_status == "failed"
    assert len(hook.requests) == 3

    row = alert_row(engine)
    assert row.delivery_status == "failed" and "HTTP 500" in row.delivery_error and row.delivery_attempts == 3
    [event] = alert_events_rows(engine)
    assert event.delivery_status == "failed"
    # the flow run's id is recorded without being passed in
    assert event.flow_run_id == str(state.state_details.flow_run_id)


def read_artifact(flow_run_id, key):
    """This run's artifact with that key. (Artifact.get() sends nulls the 3.8.8
    server rejects, so every filter is given.)"""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter, ArtifactFilterKey, FlowRunFilter, FlowRunFilterId, TaskRunFilter,
    )

    with get_client(sync_client=True) as client:
        [artifact] = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
            task_run_filter=TaskRunFilter(),
            limit=1,
            offset=0,
            sort="CREATED_DESC",
        )
    return artifact


def test_publishes_the_alert_state_artifact(prefect_server, db, database_url):
    engine = migrated(db)
    add_results(engine, "toxicity", passed=5)  # not enough data
    add_results(engine, "hallucination", passed=40, not_passed=10)
    with WebhookReceiver() as hook:
        settings = make_settings(database_url, alert_webhook_url=hook.url, hallucination_rate_max=0.1)
        state = end_of_scoring_run(settings, flow_run_id="given-run-id", return_state=True)
    results = state.result()
    assert [(r.rule, r.outcome, r.transition) for r in results] == [
        ("toxicity_rate", "not_enough_data", None),
        ("toxicity_session_rate", "not_enough_data", None),  # on by default; no session results
        ("hallucination_rate", "firing", "fired"),
        ("dead_delivery_rate", "ok", None),  # after the deliveries: the one just delivered counts
    ]
    assert hook.requests[0].json()["flow_run_id"] == "given-run-id"

    artifact = read_artifact(state.state_details.flow_run_id, ALERT_STATE_KEY)
    assert artifact.type == "markdown"
    markdown = artifact.data
    # rule | segment | state | evaluation | value | baseline | limit | p | samples (baseline; min)
    assert "| toxicity_rate | overall | **OK** | not enough data | 0.0% | n/a | max 5.0% | n/a | 5 (0; 10) |" in markdown
    assert (
        "| hallucination_rate | overall | **FIRING** | firing | 20.0% | n/a | max 10.0% | n/a | 50 (0; 10) |"
        in markdown
    )
    assert "fired, delivery delivered" in markdown
    assert "| judge_failure_rate | - | disabled |" in markdown
    assert "| dead_delivery_rate | overall | **OK** | ok | 0.0% | n/a | max 0.0% | n/a | 1 (0; 0) |" in markdown


def test_a_database_failure_fails_the_task(prefect_server):
    # nothing listens on this port: the database is unreachable
    settings = make_settings("postgresql+psycopg://judgeflow@127.0.0.1:1/nowhere")
    state = end_of_scoring_run(settings, return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception):
        state.result()
