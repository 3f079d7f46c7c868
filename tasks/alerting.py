"""Alert evaluation at the end of a scoring run."""

from __future__ import annotations

import logging

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from judgeflow.alerts.service import RuleEvaluation, evaluate_rules, render_markdown
from judgeflow.config.scrub import scrub
from judgeflow.config.settings import Settings

log = logging.getLogger("judgeflow.alerts")

ALERT_STATE_KEY = "judgeflow-alert-state"


# retries=0: a notification that could not be sent stays pending in the outbox (judgeflow/alerts/outbox.py)
# and is sent again at the next evaluation
@task(name="evaluate-alert-rules", cache_policy=NO_CACHE, persist_result=False, retries=0)
def evaluate_alert_rules(settings: Settings, flow_run_id: str | None = None) -> list[RuleEvaluation]:
    """Evaluate every enabled alert rule, send the notifications due, and
    publish the rules' state as a markdown artifact.

    Returns the enabled rules' evaluations. Never raises because a notification
    could not be delivered (that is recorded in ``judgeflow.alert_events``); a
    database error does raise. Safe to retry: the state is persisted, so a
    second evaluation does not repeat a notification."""
    if flow_run_id is None:
        from prefect.runtime import flow_run

        flow_run_id = flow_run.get_id()
    everything = evaluate_rules(settings, flow_run_id=flow_run_id, include_disabled=True)
    try:
        create_markdown_artifact(
            key=ALERT_STATE_KEY, markdown=scrub(render_markdown(everything)), description="judgeflow alert rules"
        )
    except Exception as error:  # the artifact is a view; the state is in the database
        log.warning("could not publish the alert state artifact: %s", error)
    return [e for e in everything if e.enabled]
