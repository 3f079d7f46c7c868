"""The scoring flow: claim new traces in batches, fan each batch out to one
task that scores its (trace, metric) pairs concurrently, each retried and
failing alone (or, with ``fanout="pair"``, each pair to its own retrying
task), write results as they arrive, report, evaluate alerts. Claiming continues while earlier work is scored, so the
judge never waits for the database.

Flows only wire: every database read/write and judge call happens in a task.
Settings are read here, at the entry point, and passed down; flow parameters
carry only non-secret run configuration.
"""

from __future__ import annotations

import math
from concurrent.futures import CancelledError
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Literal

from prefect import flow, get_run_logger
from prefect.futures import as_completed
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from judgeflow.budget import Reservation, RunBudget
from judgeflow.db.trace_source import trace_source
from judgeflow.db.unusable import describe as describe_unusable
from judgeflow.errors import ConfigError
from judgeflow.judge.pricing import require_prices
from judgeflow.run_progress import stop_requested
from judgeflow.settings import Settings, run_settings
from judgeflow.tasks.claims import (
    LeaseKeeper,
    advance_watermark,
    claim_traces,
    count_left_to_other_runs,
    count_pending_work,
    plan_source_reads,
)
from judgeflow.tasks import reuse
from judgeflow.tasks.database import ensure_schema
from judgeflow.tasks.epochs import record_judge_epochs
from judgeflow.tasks.reporting import (
    Progress,
    RunSummary,
    SummaryBuilder,
    announce_budget_exhausted,
    publish_run_summary,
)
from judgeflow.tasks.sampling import plan_night_sample, publish_sample_plan, reweigh_sampled_nights
from judgeflow.tasks.scoring import score_and_store, score_batch, start_judge
from judgeflow.tasks.phoenix_write_back import write_scores_to_phoenix
from judgeflow.tasks.source_rows import count_unusable_rows
from judgeflow.tasks.work import METRIC_NAMES, TraceWork

Fanout = Literal["pair", "batch"]

# Hard ceiling on max_concurrency (pairs scored at once per process); only
# guards against a misconfigured parameter.
MAX_THREADS = 128

# A batch's default size, per judge call allowed in flight (and its floor).
# The run keeps 2 + ceil(max_concurrency / batch_size) batches in flight; at
# 8 pairs per slot they hold enough ready judge calls to keep every slot busy
# while the oldest batch finishes its tail, and a run of thousands of traces
# costs a few dozen Prefect task runs rather than hundreds (docs/benchmark.md).
PAIRS_PER_SLOT = 8
MIN_BATCH_SIZE = 100


def default_batch_size(max_concurrency: int) -> int:
    """The batch size a run uses unless given one: ``PAIRS_PER_SLOT`` pairs per
    judge call in flight, at least ``MIN_BATCH_SIZE`` (100 at the default 8 in flight)."""
    return max(MIN_BATCH_SIZE, PAIRS_PER_SLOT * max_concurrency)


def _run_name() -> str:
    return f"score-{datetime.now(timezone.utc):%Y-%m-%dT%H:%M}"


def _retry_delays(settings: Settings) -> list[float]:
    return [settings.task_retry_delay_s * 2**i for i in range(settings.task_retries)]


def settle(running: list) -> None:
    """Cancel submitted tasks that have not started and wait for the rest."""
    for future in running:
        future.wrapped_future.cancel()  # only succeeds for a task still queued
    for future in running:
        try:
            future.wait()
        except (Exception, CancelledError):  # cancelled, or failed: either way it no longer runs
            pass


@contextmanager
def _summary_if_stopped(summarise, drain):
    """A run stopped by an infrastructure failure (the database gone for
    longer than the retries ride out) lets the work in flight finish, says
    what it did and what it left, then fails."""
    try:
        yield
    except Exception as error:
        drain()
        summary = summarise([f"the run stopped early ({type(error).__name__}: {error}); "
                             "pairs it did not score are left for the next run"])
        try:
            publish_run_summary(summary)
        except Exception as publish_error:
            get_run_logger().warning("could not publish the run summary: %s", publish_error)
        raise


def score_traces(
    settings: Settings,
    *,
    batch_size: int | None,
    limit: int | None,
    since: datetime | None,
    until: datetime | None,
    sample_rate: float,
    metrics: list[str],
    rescore: bool,
    fanout: Fanout = "batch",
    retry_failed: bool = False,
) -> RunSummary:
    """The body shared by the nightly and the backfill flows.

    ``fanout="batch"`` (the default) submits one task per claimed batch whose
    pairs run concurrently in-process, each retried on the same schedule and
    failing alone; the task run is named for its trace ids (searchable on the
    run's Task Runs tab) and publishes a table artifact with a row per pair.
    ``fanout="pair"`` submits one retrying Prefect task per (trace, metric),
    named ``<metric>:<trace id>``: a Prefect task run costs milliseconds of
    client and tens of milliseconds of server CPU, which bounds pair mode to
    roughly a tenth of batch mode's throughput on a small machine and writes two
    task runs per trace into Prefect's database (docs/benchmark.md).

    A pair that ended 'failed' in ``JUDGEFLOW_MAX_RUNS_PER_PAIR`` runs is given
    up unless ``retry_failed``."""
    logger = get_run_logger()
    for metric in metrics:
        if metric not in METRIC_NAMES:
            raise ConfigError(f"unknown metric {metric!r}; choose from {', '.join(METRIC_NAMES)}")
    if not 0.0 < sample_rate <= 1.0:
        raise ConfigError("sample_rate must be in (0, 1]")
    if fanout not in ("pair", "batch"):
        raise ConfigError(f"fanout must be 'pair' or 'batch', not {fanout!r}")
    if settings.max_concurrency > MAX_THREADS:
        raise ConfigError(f"max_concurrency may be at most {MAX_THREADS}")
    if batch_size is None:
        batch_size = default_batch_size(settings.max_concurrency)
    if batch_size < 1:
        raise ConfigError("batch_size must be at least 1")

    budget = None
    if settings.run_budget_usd is not None:
        prices = require_prices(settings, why=f"a run budget of ${settings.run_budget_usd:g} is set")
        budget = RunBudget(settings.run_budget_usd, prices, max_field_chars=settings.max_field_chars)

    started = time.monotonic()
    # the run's time budget, as wall-clock time: tasks compare against it too
    deadline = time.time() + settings.max_run_duration_s
    budget_notes: list[str] = []
    run_id = str(flow_run.get_id() or uuid.uuid4())
    owner = f"{run_id}:{uuid.uuid4().hex[:8]}"
    run_started = datetime.now(timezone.utc)
    rescore_before = run_started if rescore else None
    # run_started: a pair this run has written is done for this run whatever
    # its status, so a second copy of a duplicate id never gets a second go
    filters = dict(
        since=since, until=until, sample_rate=sample_rate, rescore_before=rescore_before,
        settle_delay_s=settings.settle_delay_s, run_started=run_started,
        max_failed_runs=None if retry_failed else settings.max_runs_per_pair,
    )

    ensure_schema(settings)
    # where the run reads: from the watermark (minus the look-back), or exactly
    # its range with --since/--until or re-scoring (judgeflow/db/watermark.py)
    ranged = since is not None or until is not None or rescore
    plan = plan_source_reads(settings, metrics, sample_rate=sample_rate, ranged=ranged)
    filters["plan"] = plan
    # a nightly run leaves the traces a sample budget did not select to backfills;
    # with a budget it plans tonight's sample before any judge call (judgeflow/sampling/)
    filters["not_sampled_done"] = not ranged
    sample = (plan_night_sample(settings, plan, metrics, since=since, until=until, sample_rate=sample_rate,
                                flow_run_id=run_id) if settings.sample_budget_usd is not None and not ranged else None)
    # a report for the summary, not a precondition: counted while the run starts scoring,
    # over the rows the run reads (all of them when it has no window)
    window_start = plan.lo if plan.lo is not None else since
    unusable_counted = count_unusable_rows.submit(settings, window_start, window_start is None)
    pending = count_pending_work(settings, metrics, limit=limit, **filters)
    logger.info("%d (trace, metric) pairs pending in %s", pending, trace_source(settings).display)
    # a new judge model or metric version starts a judge epoch: before the first result is written
    epochs_started = record_judge_epochs(settings, metrics, flow_run_id=run_id) if pending else []
    # the judge (litellm's import, judge worker processes: seconds) only when
    # there is work for it, built while the first batch is claimed
    judge_started = start_judge.submit(settings) if pending else None
    progress = Progress(pending, every=batch_size, flow_run_id=run_id, budget_usd=settings.run_budget_usd)
    if fanout == "batch":
        # Batches queued behind the one being scored: enough pairs to keep every
        # slot busy while the oldest batch finishes its tail, plus one so a batch
        # held up by a slow pair (a retry, a stall) does not starve the others.
        window = 2 + math.ceil(settings.max_concurrency / batch_size)
    else:
        # one task per pair: never more submitted than judge calls allowed in flight
        window = settings.max_concurrency
    pair_scorer = score_and_store.with_options(
        retries=settings.task_retries, retry_delay_seconds=_retry_delays(settings)
    )

    totals = SummaryBuilder()
    traces_seen: set[str] = set()  # only kept for --limit
    running: list = []
    cursor = None
    batch_no = 0

    reservations: dict[int, Reservation] = {}  # id(future) -> what it holds against the budget

    def collect() -> None:
        done = next(as_completed(list(running)))  # whichever finishes first
        running.remove(done)
        result = done.result()
        outcomes = result if isinstance(result, list) else [result]
        totals.add(outcomes)
        progress.advance(outcomes, batch=batch_no)
        if budget is not None:
            budget.settle(reservations.pop(id(done)), outcomes)

    def affordable(work: TraceWork) -> bool:
        """Whether the budget lets ``work`` start; waits for work in flight
        (whose estimates become real costs) before saying no."""
        if budget is None:
            return True
        while not budget.fits(work) and running:
            collect()
        if not budget.fits(work):
            budget.exhausted = True
        return not budget.exhausted

    left: dict[str, int] | None = {}
    stopped = False

    def summarise(extra_notes: list[str] = ()) -> RunSummary:
        summary = totals.build(
            duration_s=time.monotonic() - started, flow_run_id=run_id, pending_at_start=pending,
            left_to_other_runs=left,
        )
        unusable = unusable_counted.result()  # never raises: None when the rows could not be counted
        notes = [] if unusable is None else describe_unusable(trace_source(settings), unusable)
        if unusable is None:
            notes.append("unusable source rows (NULL id / created_at, duplicate ids) could not be counted; "
                         "see the run log and `judgeflow db check`")
        return summary.model_copy(update={
            "unusable_rows": None if unusable is None else unusable.as_dict(), "notes": [*notes, *extra_notes],
            "judge_epochs": epochs_started,
        })

    def drain() -> None:
        while running:
            try:
                collect()
            except Exception as error:  # already failing: finish the rest, keep the first error
                logger.warning("a task in flight failed too: %s", error)

    # The keeper releases the run's claims on the way out, also when a task or
    # the database failed: only once nothing still judges or writes under them.
    with LeaseKeeper(settings, owner, before_release=lambda: settle(running)) as keeper, \
            _summary_if_stopped(summarise, drain):
        while True:
            if time.time() >= deadline:
                budget_notes.append(_budget_spent(settings, time.monotonic() - started))
                logger.warning(budget_notes[-1])
                break
            if stop_requested():
                stopped = True
                logger.warning("stop requested (Ctrl-C): no more claims; judge calls in flight finish and are "
                               "stored, pairs not started are given back for the next run")
                break
            room = batch_size
            if limit is not None:
                # a trace counts once however many of its metrics are pending
                room = min(room, (limit - len(traces_seen)) * len(metrics))
                if room <= 0:
                    break
            batch = claim_traces(settings, owner, metrics, room, cursor=cursor, owner_key=keeper.owner_key, **filters)
            claimed_at = time.time()
            if batch.cursor is None:
                break
            cursor = batch.cursor
            batch_no += 1
            items: list[TraceWork] = batch.items
            if limit is not None:
                # new traces in the batch's (oldest first) order, up to the limit
                new = [t for t in dict.fromkeys(w.trace_id for w in items) if t not in traces_seen]
                allowed = set(new[: limit - len(traces_seen)])
                items = [w for w in items if w.trace_id in allowed or w.trace_id in traces_seen]
                traces_seen.update(w.trace_id for w in items)
            # pairs the budget refuses keep their claims until the run ends, when
            # LeaseKeeper releases every claim the run still holds: they stay pending
            if items and fanout == "batch":
                reservation = Reservation()
                admitted = []
                for work in items:
                    if not affordable(work):
                        break
                    if budget is not None:
                        budget.reserve(work, reservation)
                    admitted.append(work)
                if admitted:
                    future = score_batch.submit(
                        admitted, settings, owner, flow_run_id=run_id, rescore_before=rescore_before,
                        retry_delays=_retry_delays(settings), deadline=deadline, claimed_at=claimed_at,
                        budget=budget,
                    )
                    running.append(future)
                    reservations[id(future)] = reservation
                    progress.show()
            for work in items if fanout == "pair" else ():
                while len(running) >= window:
                    collect()
                if not affordable(work):
                    break
                reservation = Reservation()
                if budget is not None:
                    budget.reserve(work, reservation)
                future = pair_scorer.submit(
                    work, settings, owner, flow_run_id=run_id, rescore_before=rescore_before,
                    max_attempts=settings.task_retries + 1, deadline=deadline, budget=budget,
                )
                running.append(future)
                reservations[id(future)] = reservation
                progress.show()
            if budget is not None and budget.exhausted:
                logger.warning(
                    "run budget $%.4f reached (spent $%.4f, in flight ~$%.4f): no more claims; "
                    "finishing the work in flight, the rest stays pending",
                    budget.limit_usd, budget.spent_usd, budget.in_flight_usd,
                )
                break
            while len(running) >= window:
                collect()
        # what other live runs hold once this one claims no more: counted while its
        # last batches finish
        left_counted = count_left_to_other_runs.submit(settings, owner, metrics, **filters)
        while running:
            collect()
        progress.show()  # a run that claimed nothing has its artifact too
        left = left_counted.result()
        # past what is now scored, never past a pair still without a result
        # (claims still held here, this run's unscored ones included)
        advance_watermark(settings, plan, metrics, sample_rate=sample_rate, flow_run_id=run_id)
    if judge_started is not None:
        judge_started.wait()
    reuse.in_flight.forget(owner)  # identical pairs of this run were coalesced through it

    summary = summarise(budget_notes)
    summary.stopped = stopped
    if sample is not None:
        summary.notes.extend(publish_sample_plan(settings, sample, run_id).notes())
    elif ranged and summary.scored:
        reweigh_sampled_nights(settings)  # a backfill may have judged traces a sample left out
    if summary.deferred:
        summary.notes.append(f"{summary.deferred} claimed pair(s) were not started before the time budget ran "
                             "out, or not retried once the spend budget had no room, and were given back for the "
                             "next run")
    if budget is not None:
        summary.budget_usd = budget.limit_usd
        summary.budget_spent_usd = round(budget.spent_usd, 6)
        if budget.exhausted:
            summary.budget_exhausted = True
            # counted after the run released its claims: what the next run will find
            summary.left_pending = count_pending_work(settings, metrics, limit=None, **filters)
    if settings.source == "phoenix" and settings.phoenix_write_back:
        # after the results are stored; the results table stays the source of truth
        summary.notes.append(write_scores_to_phoenix(settings, summary.flow_run_id).note)
    progress.finish()
    publish_run_summary(summary)
    if summary.budget_exhausted:
        announce_budget_exhausted(summary)
    return summary


def _budget_spent(settings: Settings, elapsed_s: float) -> str:
    return (f"time budget spent (JUDGEFLOW_MAX_RUN_DURATION={settings.max_run_duration}, {elapsed_s:.0f}s "
            "elapsed): no more claims; pairs in flight finish their current judge call, start no new attempt, "
            "and what is left stays pending for the next run")


@flow(name="score-new-traces", flow_run_name=_run_name, task_runner=ThreadPoolTaskRunner(max_workers=MAX_THREADS))
def score_new_traces(
    batch_size: int | None = None,
    limit: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    sample_rate: float = 1.0,
    metrics: list[str] = list(METRIC_NAMES),
    max_concurrency: int | None = None,
    evaluate_alerts: bool = True,
    fanout: Fanout = "batch",
    judge_processes: int | None = None,
    settle_delay: str | None = None,
    budget_usd: float | None = None,
    retry_failed: bool = False,
    sample_budget_usd: float | None = None,
) -> RunSummary:
    """Score every trace that has no result yet (new, late, or failed before),
    oldest first, then evaluate the alert rules.

    ``batch_size``: (trace, metric) pairs claimed per batch; unset, 8 per
    judge call allowed in flight, at least 100 (:func:`default_batch_size`).
    ``max_concurrency`` and ``judge_processes`` override
    ``JUDGEFLOW_MAX_CONCURRENCY`` (judge calls in flight) and
    ``JUDGEFLOW_JUDGE_PROCESSES`` (worker processes making them);
    ``settle_delay`` (e.g. "10m") overrides ``JUDGEFLOW_SETTLE_DELAY``: only
    traces older than it are scored; ``budget_usd`` overrides
    ``JUDGEFLOW_RUN_BUDGET_USD``: the run stops claiming once what it spent plus
    what it has in flight reaches it, and leaves the rest pending.
    ``retry_failed`` also retries the pairs given up after failing in
    ``JUDGEFLOW_MAX_RUNS_PER_PAIR`` runs. ``sample_budget_usd`` overrides
    ``JUDGEFLOW_SAMPLE_BUDGET_USD``: when judging every new trace would cost
    more, a stratified sample that fits is judged and the rest recorded as not
    sampled (docs/running.md)."""
    settings = run_settings(max_concurrency=max_concurrency, judge_processes=judge_processes,
                            settle_delay=settle_delay, run_budget_usd=budget_usd,
                            sample_budget_usd=sample_budget_usd)
    from judgeflow.tasks.alerting import evaluate_alert_rules

    try:
        summary = score_traces(
            settings, batch_size=batch_size, limit=limit, since=since, until=until,
            sample_rate=sample_rate, metrics=list(metrics), rescore=False, fanout=fanout, retry_failed=retry_failed,
        )
    except Exception:
        # Alert rules run at the end of every run, also one that stopped part-way:
        # what it did score counts, and a run failing every night must not hide
        # a regression. The run then ends Failed with its own error.
        if evaluate_alerts:
            try:
                evaluate_alert_rules(settings)
            except Exception as alert_error:
                get_run_logger().error("alert rules could not be evaluated either: %s", alert_error)
        raise
    if evaluate_alerts:
        evaluate_alert_rules(settings, flow_run_id=summary.flow_run_id)
    from judgeflow.tasks.trend import publish_trend

    publish_trend(settings)
    return summary
