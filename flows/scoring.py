"""The scoring flow: claim new traces in batches, fan each (trace, metric) out
to a retrying task, write results as they arrive, report, evaluate alerts.

Flows only wire: every database read/write and judge call happens in a task.
Settings are read here, at the entry point, and passed down; flow parameters
carry only non-secret run configuration.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

from prefect import flow, get_run_logger
from prefect.futures import as_completed
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from judgeflow.errors import ConfigError
from judgeflow.settings import Settings, load_settings
from judgeflow.tasks.claims import LeaseKeeper, claim_traces, count_pending_work
from judgeflow.tasks.database import ensure_schema
from judgeflow.tasks.reporting import Progress, RunSummary, publish_run_summary
from judgeflow.tasks.scoring import score_and_store
from judgeflow.tasks.work import METRIC_NAMES, ScoreOutcome, TraceWork

# Hard ceiling on worker threads; the flow keeps at most max_concurrency tasks
# submitted at once, so this only guards against a misconfigured parameter.
MAX_THREADS = 128


def _run_name() -> str:
    return f"score-{datetime.now(timezone.utc):%Y-%m-%dT%H:%M}"


def _retry_delays(settings: Settings) -> list[float]:
    return [settings.task_retry_delay_s * 2**i for i in range(settings.task_retries)]


def score_traces(
    settings: Settings,
    *,
    batch_size: int,
    limit: int | None,
    since: datetime | None,
    until: datetime | None,
    sample_rate: float,
    metrics: list[str],
    rescore: bool,
) -> RunSummary:
    """The body shared by the nightly and the backfill flows."""
    logger = get_run_logger()
    for metric in metrics:
        if metric not in METRIC_NAMES:
            raise ConfigError(f"unknown metric {metric!r}; choose from {', '.join(METRIC_NAMES)}")
    if not 0.0 < sample_rate <= 1.0:
        raise ConfigError("sample_rate must be in (0, 1]")
    if settings.max_concurrency > MAX_THREADS:
        raise ConfigError(f"max_concurrency may be at most {MAX_THREADS}")

    started = time.monotonic()
    run_id = str(flow_run.get_id() or uuid.uuid4())
    owner = f"{run_id}:{uuid.uuid4().hex[:8]}"
    rescore_before = datetime.now(timezone.utc) if rescore else None
    filters = dict(since=since, until=until, sample_rate=sample_rate, rescore_before=rescore_before)

    ensure_schema(settings)
    pending = count_pending_work(settings, metrics, limit=limit, **filters)
    logger.info("%d (trace, metric) pairs pending in %s", pending, settings.traces_table)
    progress = Progress(pending)
    scorer = score_and_store.with_options(retries=settings.task_retries, retry_delay_seconds=_retry_delays(settings))

    outcomes: list[ScoreOutcome] = []
    traces_seen: set[str] = set()
    in_flight: set = set()
    cursor = None
    batch_no = 0

    def collect_one() -> None:
        future = next(as_completed(list(in_flight)))
        in_flight.discard(future)
        outcomes.append(future.result())

    with LeaseKeeper(settings, owner):
        while True:
            room = batch_size
            if limit is not None:
                # a trace counts once however many of its metrics are pending
                room = min(room, (limit - len(traces_seen)) * len(metrics))
                if room <= 0:
                    break
            batch = claim_traces(settings, owner, metrics, room, cursor=cursor, **filters)
            if batch.cursor is None:
                break
            cursor = batch.cursor
            batch_no += 1
            items: list[TraceWork] = batch.items
            if limit is not None:
                allowed = set(sorted({w.trace_id for w in items} - traces_seen)[: limit - len(traces_seen)])
                items = [w for w in items if w.trace_id in allowed or w.trace_id in traces_seen]
            for work in items:
                traces_seen.add(work.trace_id)
                while len(in_flight) >= settings.max_concurrency:
                    collect_one()
                in_flight.add(
                    scorer.submit(
                        work, settings, owner, flow_run_id=run_id, rescore_before=rescore_before,
                        max_attempts=settings.task_retries + 1,
                    )
                )
            progress.advance(len(items), batch=batch_no)
        while in_flight:
            collect_one()

    summary = RunSummary.from_outcomes(
        outcomes, duration_s=time.monotonic() - started, flow_run_id=run_id, pending_at_start=pending
    )
    publish_run_summary(summary)
    return summary


@flow(name="score-new-traces", flow_run_name=_run_name, task_runner=ThreadPoolTaskRunner(max_workers=MAX_THREADS))
def score_new_traces(
    batch_size: int = 100,
    limit: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    sample_rate: float = 1.0,
    metrics: list[str] = list(METRIC_NAMES),
    max_concurrency: int | None = None,
    evaluate_alerts: bool = True,
) -> RunSummary:
    """Score every trace that has no result yet (new, late, or failed before),
    oldest first, then evaluate the alert rules."""
    overrides = {"max_concurrency": max_concurrency} if max_concurrency else {}
    settings = load_settings(**overrides)
    summary = score_traces(
        settings, batch_size=batch_size, limit=limit, since=since, until=until,
        sample_rate=sample_rate, metrics=list(metrics), rescore=False,
    )
    if evaluate_alerts:
        from judgeflow.tasks.alerting import evaluate_alert_rules

        evaluate_alert_rules(settings, flow_run_id=summary.flow_run_id)
    return summary
