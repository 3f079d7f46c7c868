"""The trend artifact each scoring run publishes (see judgeflow.alerts.trend)."""

from __future__ import annotations

import logging

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from judgeflow.alerts.trend import compute_trend, render_markdown
from judgeflow.db.engine import engine_for
from judgeflow.config.settings import Settings

log = logging.getLogger("judgeflow.reporting")

TREND_KEY = "judgeflow-trend"
TREND_DAYS = 14


# retries=0: a view; a failure is logged
@task(name="publish-trend", cache_policy=NO_CACHE, persist_result=False, retries=0)
def publish_trend(settings: Settings) -> str | None:
    """Publish the last 14 days' per-day rates (overall and top segments) with
    the change against the baseline as a markdown artifact. The trend is a view:
    a failure to build or publish it is logged, never fails the run."""
    try:
        with engine_for(settings).connect() as conn:
            trend = compute_trend(conn, settings, days=TREND_DAYS)
        markdown = render_markdown(trend)
        create_markdown_artifact(key=TREND_KEY, markdown=markdown, description="judgeflow trend: last 14 days")
    except Exception as error:
        log.warning("could not publish the trend artifact: %s", error)
        return None
    return markdown
