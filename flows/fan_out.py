"""A night in shards, the parent's side: plan the night's sample (under a
sample budget), enter the night's spend budget and trace limit in the ledger
its children share (judgeflow/db/night_ledger.py), start N child flow runs of
the shard deployment, wait for them, and write the night's one summary of
what they stored. The caller (``score_new_traces``) evaluates the alert rules
and the trend once, after this returns. Only wiring: the I/O is in
``tasks/shards.py``.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

from prefect import get_run_logger
from prefect.runtime import flow_run

from judgeflow.config.settings import Settings
from judgeflow.db.night_ledger import NightLimits
from judgeflow.errors import ConfigError
from judgeflow.metrics.registry import chosen
from judgeflow.run.entry import run_stop
from judgeflow.run.shards import SHARD_DEPLOYMENT, SHARD_FLOW, lost_note, night_totals, refusal
from judgeflow.tasks.database import ensure_schema
from judgeflow.tasks.reporting import RunSummary, publish_run_summary
from judgeflow.sampling.planner import NightPlan
from judgeflow.tasks.claims import plan_source_reads
from judgeflow.tasks.sampling import plan_night_sample, publish_sample_plan
from judgeflow.tasks.shards import open_night_ledger, read_shard_results, start_shard_runs, wait_for_shard_runs


def check_shards(settings: Settings, shards: int) -> None:
    """A night the shards cannot run is refused in one line, before any child starts."""
    refused = refusal(shards, judge_batch=settings.judge_batch)
    if refused:
        raise ConfigError(refused)


def _night_limits(settings: Settings, parent: str, *, limit: int | None, metrics: list[str],
                  parameters: dict) -> tuple[NightLimits, NightPlan | None]:
    """What the children hold together: the run budget, or what is left of the night's sample budget
    when smaller (the sample planned here, once), and the trace limit."""
    sample = None
    if settings.sample_budget_usd is not None and parameters["since"] is None and parameters["until"] is None:
        plan = plan_source_reads(settings, metrics, sample_rate=parameters["sample_rate"], ranged=False)
        sample = plan_night_sample(settings, plan, metrics, sample_rate=parameters["sample_rate"],
                                   flow_run_id=parent)
    budget = settings.run_budget_usd
    if sample is not None and (budget is None or sample.run_limit_usd < budget):
        budget = sample.run_limit_usd
    return NightLimits(budget_usd=budget, trace_limit=limit,
                       sample_night=sample.night if sample else None,
                       sample_budget_usd=sample.budget_usd if sample else None,
                       reads_from=sample.reads_from if sample else None), sample


def _run_children(settings: Settings, deployment: str, shards: int, parameters: dict, parent: str,
                  night: datetime, stop) -> tuple[list, int, tuple[float, float], bool]:
    """Start the children and wait for them; a child lost (Crashed, Failed, Cancelled by no one here)
    gets one take-over run once they have all ended: its claims are free when its process is gone, but
    its siblings may have finished the backlog before that. Its reports, traces, the ledger's spend, and
    whether the parent was cancelled."""
    ids = start_shard_runs(deployment, shards, parameters, parent_run_id=parent, night=night)
    children = [(shard, run_id, False) for shard, run_id in enumerate(ids, start=1)]
    # the parent cancelled through Prefect (the UI): Prefect kills the processes a worker or runner started,
    # but the children are cancelled here at once, and a parent the command runs itself ends here
    cancelled = wait_for_shard_runs(ids, stop, parent)
    reports, traces, spend = read_shard_results(settings, children, parent)
    lost = [report.shard for report in reports if report.lost]
    if lost and not (cancelled or stop.requested()):
        again = start_shard_runs(deployment, shards, parameters, parent_run_id=parent, night=night, takeover_of=lost)
        children += [(shard, run_id, True) for shard, run_id in zip(lost, again)]
        cancelled = wait_for_shard_runs(again, stop, parent)
        reports, traces, spend = read_shard_results(settings, children, parent)
    return reports, traces, spend, cancelled


def score_in_shards(settings: Settings, shards: int, deployment: str | None, parameters: dict, *,
                    limit: int | None = None) -> RunSummary:
    """The night as ``shards`` child flow runs of ``deployment`` (default: ``score-shard/shards``),
    each claiming from the same backlog; ``parameters``: what every child is handed. ``limit`` (traces),
    the run budget and the sample budget hold for the night as a whole."""
    started = time.monotonic()
    parent = str(flow_run.get_id() or uuid.uuid4())
    notes = ensure_schema(settings)  # once, before the children race to it
    limits, sample = _night_limits(settings, parent, limit=limit, metrics=chosen(parameters["metrics"]),
                                   parameters=parameters)
    limits = open_night_ledger(settings, parent, limits)
    # the night the parent was scheduled for: a retried parent names its children the same
    night = flow_run.scheduled_start_time or datetime.now(timezone.utc)
    stop = run_stop()
    reports, traces, spend, cancelled = _run_children(settings, deployment or f"{SHARD_FLOW}/{SHARD_DEPLOYMENT}",
                                                      shards, {**parameters, "night": parent}, parent, night, stop)
    lost = [lost_note(report, shards) for report in reports if report.lost]
    for note in lost:
        get_run_logger().warning(note)
    if cancelled:
        lost.append("the night's flow run was cancelled: its shards were cancelled, what they stored stays, "
                    "the rest is pending for the next run")
    summary = RunSummary(flow_run_id=parent, traces=traces, **night_totals(reports),
                         duration_s=round(time.monotonic() - started, 2), stopped=stop.requested() or cancelled,
                         cancelled=cancelled,
                         shards=[report.row(shards) for report in reports], notes=[*notes, *lost])
    if limits.budget_usd is not None:  # the night's figures: every child's charges, as the ledger holds them
        summary.budget_usd, summary.budget_spent_usd = limits.budget_usd, round(spend[0], 6)
    if sample is not None:
        judged_by = [report.flow_run_id for report in reports]
        summary.notes.extend(publish_sample_plan(settings, sample, parent, judged_by=judged_by).notes())
    publish_run_summary(summary)
    return summary
