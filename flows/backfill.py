"""On-demand re-scoring of a time range (run from the CLI or the Prefect UI)."""

from __future__ import annotations

from datetime import datetime

from prefect import flow

from judgeflow.flows.scoring import score_traces
from judgeflow.run.schedule import MAX_THREADS
from judgeflow.run.entry import run_settings
from judgeflow.tasks.reporting import RunSummary
from judgeflow.metrics.registry import chosen

from prefect.task_runners import ThreadPoolTaskRunner


@flow(
    name="backfill-traces",
    flow_run_name="backfill-{since:%Y-%m-%d}..{until:%Y-%m-%d}",
    task_runner=ThreadPoolTaskRunner(max_workers=MAX_THREADS),
)
def backfill_traces(
    since: datetime,
    until: datetime,
    rescore: bool = False,
    batch_size: int | None = None,
    metrics: list[str] | None = None,
    max_concurrency: int | None = None,
    judge_processes: int | None = None,
    budget_usd: float | None = None,
    batch: bool | None = None,
    cancel_batches: bool = False,
) -> RunSummary:
    """Score every trace created in [since, until) that lacks a result; with
    ``rescore`` also those already scored (e.g. after a metric version change).
    ``batch_size`` and ``budget_usd`` as for score-new-traces (unset: sized for
    ``max_concurrency``; ``JUDGEFLOW_RUN_BUDGET_USD``).
    Pairs the nightly run gave up on (``JUDGEFLOW_MAX_RUNS_PER_PAIR``) are retried.
    ``batch`` and ``cancel_batches`` as for score-new-traces."""
    settings = run_settings(max_concurrency=max_concurrency, judge_processes=judge_processes,
                             run_budget_usd=budget_usd, judge_batch=batch)
    return score_traces(
        settings, batch_size=batch_size, limit=None, since=since, until=until,
        sample_rate=1.0, metrics=chosen(metrics), rescore=rescore,
        retry_failed=True,  # asked for by a person: pairs given up on get another go
        cancel_batches=cancel_batches,
    )
