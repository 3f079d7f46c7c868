"""``judgeflow serve``: the nightly schedule and the on-demand backfill in one
long-running process (Prefect's ``serve``), for machines without a work pool
and a worker.

The three deployments are the ones ``deployments/prefect.yaml`` defines, with the
same names, schedule, parameters and concurrency (a test keeps them equal):

- ``score-new-traces/nightly``: cron ``0 2 * * *`` in ``JUDGEFLOW_SCHEDULE_TIMEZONE``
  (default UTC); at most one run at a time, a run due while the previous one is
  still going is cancelled (skipped);
- ``backfill-traces/on-demand``: no schedule, started from the UI with a range;
- ``score-shard/shards``: the children of a nightly run with ``shards`` > 1; no
  schedule and no concurrency limit (``--limit`` must leave room for the parent
  and its N children).

Use either this or ``prefect deploy`` for a Prefect server, not both: they
register deployments of the same names.
"""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from judgeflow.errors import ConfigError
from judgeflow.config.settings import Settings

NIGHTLY_DEPLOYMENT = "nightly"
BACKFILL_DEPLOYMENT = "on-demand"
NIGHTLY_CRON = "0 2 * * *"
DEFAULT_TIMEZONE = "UTC"

# The nightly run only scores traces at least NIGHTLY_SETTLE_DELAY old. An
# application logs a trace before its streamed output, retrieved context or
# metadata are complete (or updates the row on retry); judging it half-written
# would store a score that is never revisited. Ten minutes covers loggers that
# flush or retry within seconds to minutes, and costs nothing: the traces of
# 01:50-02:00 are scored the next night, and `judgeflow score` (default 0)
# reaches them at once. Override per run with the settle_delay parameter.
NIGHTLY_SETTLE_DELAY = "10m"

NIGHTLY_PARAMETERS: dict[str, Any] = {
    "sample_rate": 1.0,
    "metrics": None,  # every registered metric (judgeflow/metrics/registry.py)
    "evaluate_alerts": True,
    "settle_delay": NIGHTLY_SETTLE_DELAY,
    "batch": None,  # JUDGEFLOW_JUDGE_BATCH decides; True: through the provider's batch API
    "shards": 1,  # > 1: the night as that many child flow runs of score-shard/shards
}
BACKFILL_PARAMETERS: dict[str, Any] = {
    "rescore": False,
    "metrics": None,  # every registered metric (judgeflow/metrics/registry.py)
}
NIGHTLY_TAGS = ["judgeflow", "nightly"]
BACKFILL_TAGS = ["judgeflow", "backfill"]
SHARD_TAGS = ["judgeflow", "shard"]


def schedule_timezone(settings: Settings, override: str | None = None) -> str:
    """The nightly schedule's IANA timezone: ``override``, else the
    ``schedule_timezone`` setting (JUDGEFLOW_SCHEDULE_TIMEZONE), else UTC."""
    name = override or getattr(settings, "schedule_timezone", None) or DEFAULT_TIMEZONE
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown timezone {name!r} for the nightly schedule (use an IANA name like Europe/Berlin)") from None
    return name


def build_deployments(settings: Settings, *, timezone: str | None = None) -> list:
    """The nightly, the backfill and the shard deployments as Prefect ``RunnerDeployment``
    objects, not yet registered. Entry points are module paths
    (``judgeflow.flows.scoring.score_new_traces``), so the process that serves
    them may start in any directory."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.schedules import Cron
    from prefect.types.entrypoint import EntrypointType

    from judgeflow.flows.backfill import backfill_traces
    from judgeflow.flows.scoring import score_new_traces
    from judgeflow.flows.shards import score_shard
    from judgeflow.run.shards import SHARD_DEPLOYMENT

    nightly = score_new_traces.to_deployment(
        name=NIGHTLY_DEPLOYMENT,
        schedules=[Cron(NIGHTLY_CRON, timezone=schedule_timezone(settings, timezone), slug="nightly")],
        parameters=dict(NIGHTLY_PARAMETERS),
        concurrency_limit=ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
        description=(
            "Score every production trace that has no result yet, then evaluate the alert rules. "
            "Runs at 02:00 every night; a run due while the previous one is still going is skipped."
        ),
        tags=list(NIGHTLY_TAGS),
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    backfill = backfill_traces.to_deployment(
        name=BACKFILL_DEPLOYMENT,
        parameters=dict(BACKFILL_PARAMETERS),
        concurrency_limit=ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE),
        description='Score (with rescore, re-score) every trace created in [since, until). Start it with "Custom run".',
        tags=list(BACKFILL_TAGS),
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    # no concurrency limit: children of a limited deployment have been left AwaitingConcurrencySlot (prefect#16027)
    shards = score_shard.to_deployment(
        name=SHARD_DEPLOYMENT,
        description="A sharded night's children, started by the nightly run with shards > 1. Not started by hand.",
        tags=list(SHARD_TAGS),
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    return [nightly, backfill, shards]


def serve(settings: Settings, *, timezone: str | None = None, limit: int | None = None) -> None:
    """Register both deployments with the Prefect API (PREFECT_API_URL: point it
    at your Prefect server to watch the runs in its UI) and run their flow runs
    in this process until it is stopped; stopping it pauses the schedule until
    the next start."""
    from prefect import serve as prefect_serve

    prefect_serve(*build_deployments(settings, timezone=timezone), limit=limit)
