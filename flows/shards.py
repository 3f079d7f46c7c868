"""A night in shards, a child's side: the ``score-shard`` flow, one of the N
flow runs a sharded night's parent starts (``flows/fan_out.py``) from the shard
deployment. It claims from the same backlog as its siblings (the claims and
leases of ``judgeflow/db/``: disjoint pairs, a dead sibling's taken over) and
writes its own summary; the alert rules and the trend are its parent's, once.
"""

from __future__ import annotations

from datetime import datetime

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from judgeflow.flows.scoring import MAX_THREADS, score_traces
from judgeflow.metrics.registry import chosen
from judgeflow.run.entry import run_settings
from judgeflow.run.shards import SHARD_FLOW
from judgeflow.tasks.reporting import RunSummary


@flow(name=SHARD_FLOW, task_runner=ThreadPoolTaskRunner(max_workers=MAX_THREADS))
def score_shard(
    shard: int = 1,
    shards: int = 1,
    batch_size: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    sample_rate: float = 1.0,
    metrics: list[str] | None = None,
    max_concurrency: int | None = None,
    judge_processes: int | None = None,
    settle_delay: str | None = None,
    retry_failed: bool = False,
    night: str | None = None,
) -> RunSummary:
    """Shard ``shard`` of ``shards``: score what is pending, as ``score-new-traces`` does, beside its
    siblings; the parameters are its parent's (``score-new-traces``), handed down. ``night``: the parent's
    flow run id, whose shared ledger holds the night's spend budget, trace limit and sample plan."""
    settings = run_settings(max_concurrency=max_concurrency, judge_processes=judge_processes,
                            settle_delay=settle_delay)
    get_run_logger().info("shard %d of %d of the night", shard, shards)
    return score_traces(settings, batch_size=batch_size, limit=None, since=since, until=until,
                        sample_rate=sample_rate, metrics=chosen(metrics), rescore=False, retry_failed=retry_failed,
                        night=night)
