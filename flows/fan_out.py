"""A night in shards, the parent's side: start N child flow runs of the shard
deployment, wait for them, and write the night's one summary of what they
stored. The caller (``score_new_traces``) evaluates the alert rules and the
trend once, after this returns. Only wiring: the I/O is in ``tasks/shards.py``.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

from prefect import get_run_logger
from prefect.runtime import flow_run

from judgeflow.config.settings import Settings
from judgeflow.errors import ConfigError
from judgeflow.run.entry import run_stop
from judgeflow.run.shards import SHARD_DEPLOYMENT, SHARD_FLOW, lost_note, night_totals, refusal
from judgeflow.tasks.database import ensure_schema
from judgeflow.tasks.reporting import RunSummary, publish_run_summary
from judgeflow.tasks.shards import read_shard_results, start_shard_runs, wait_for_shard_runs


def check_shards(settings: Settings, shards: int, *, limit: int | None) -> None:
    """A night the shards cannot hold as a whole is refused in one line, before any child starts."""
    refused = refusal(shards, limit=limit, run_budget_usd=settings.run_budget_usd,
                      sample_budget_usd=settings.sample_budget_usd, judge_batch=settings.judge_batch)
    if refused:
        raise ConfigError(refused)


def score_in_shards(settings: Settings, shards: int, deployment: str | None, parameters: dict) -> RunSummary:
    """The night as ``shards`` child flow runs of ``deployment`` (default: ``score-shard/shards``),
    each claiming from the same backlog; ``parameters``: what every child is handed."""
    started = time.monotonic()
    parent = str(flow_run.get_id() or uuid.uuid4())
    notes = ensure_schema(settings)  # once, before the children race to it
    # the night the parent was scheduled for: a retried parent names its children the same
    night = flow_run.scheduled_start_time or datetime.now(timezone.utc)
    children = start_shard_runs(deployment or f"{SHARD_FLOW}/{SHARD_DEPLOYMENT}", shards, parameters,
                                parent_run_id=parent, night=night)
    stop = run_stop()
    wait_for_shard_runs(children, stop)
    reports, traces = read_shard_results(settings, children)
    lost = [lost_note(report, shards) for report in reports if report.lost]
    for note in lost:
        get_run_logger().warning(note)
    summary = RunSummary(flow_run_id=parent, traces=traces, **night_totals(reports),
                         duration_s=round(time.monotonic() - started, 2), stopped=stop.requested(),
                         shards=[report.row(shards) for report in reports], notes=[*notes, *lost])
    publish_run_summary(summary)
    return summary
