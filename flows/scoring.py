"""The scoring flow: claim new traces in batches, hand each batch to one task
that scores its (trace, metric) pairs concurrently (each retried and failing
alone), write results as they arrive, report, evaluate alerts. Claiming
continues while earlier batches are scored, so the judge never waits for the
database.

Flows only wire: every database read/write and judge call happens in a task,
and which batch goes when is :class:`judgeflow.run.schedule.RunSchedule`'s
decision. The settings come from the entry point that started the run
(:mod:`judgeflow.run.entry`), or are built here when the flow run is its own entry
point (a deployment); flow parameters carry only non-secret run configuration.
"""

from __future__ import annotations

import functools
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture, as_completed
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from judgeflow.db.engine import engine_for
from judgeflow.db.night_ledger import NightLimits, NightSpend, NightTraces
from judgeflow.run.budget import RunBudget, run_budget, spend_budget
from judgeflow.db.claim_filters import ClaimFilters
from judgeflow.db.leases import LeaseKeeper
from judgeflow.sources.trace_source import trace_source
from judgeflow.run.entry import run_settings
from judgeflow.run.policy import RunPolicy
from judgeflow.run.progress import watch_batches
from judgeflow.run.schedule import (
    ACCOUNT, BUDGET, DEADLINE, DONE, MAX_THREADS, STOPPED, RunSchedule, bounds_for, checked_batch_size,
    default_batch_size,
)
from judgeflow.run.summary import deferred_note, online_cost, stopped_early, time_budget_spent, unusable_notes
from judgeflow.config.settings import Settings
from judgeflow.run import reuse
from judgeflow.tasks.claims import (
    advance_watermark,
    claim_traces,
    count_left_to_other_runs,
    count_pending_work,
    plan_source_reads,
)
from judgeflow.flows.fan_out import check_shards, score_in_shards
from judgeflow.tasks.batches import batches_left_out, paid_before, start_batch_judge
from judgeflow.tasks.database import ensure_schema
from judgeflow.tasks.epochs import record_judge_epochs
from judgeflow.tasks.phoenix_write_back import write_scores_to_phoenix
from judgeflow.tasks.preparation import prepare_metrics, unprepared
from judgeflow.tasks.reporting import (
    Progress,
    RunSummary,
    SummaryBuilder,
    announce_budget_exhausted,
    publish_run_summary,
)
from judgeflow.sampling.planner import TOP_UP_PASSES
from judgeflow.tasks.sampling import (
    enter_shard_spend,
    plan_night_sample,
    publish_sample_plan,
    reweigh_sampled_nights,
    top_up_night_sample,
)
from judgeflow.tasks.session_rates import store_session_rates
from judgeflow.tasks.sessions import claim_sessions, find_quiet_sessions, mark_sessions_judged, sample_quiet_sessions
from judgeflow.tasks.shards import read_night_limits
from judgeflow.tasks.scoring import close_judge, score_batch, start_judge
from judgeflow.tasks.source_rows import count_unusable_rows
from judgeflow.metrics.registry import at_level, check_names, chosen
from judgeflow.model import ClaimedBatch, Cursor

__all__ = ["MAX_THREADS", "default_batch_size", "score_new_traces", "score_traces"]


def _run_name() -> str:
    return f"score-{datetime.now(timezone.utc):%Y-%m-%dT%H:%M}"


@dataclass
class _Run:
    """What a run knows about itself from its start: who it is, what it reads and what it found."""

    settings: Settings
    metrics: list[str]
    run_id: str
    owner: str  # the claims' owner: the flow run, and this process's attempt at it
    started: float  # time.monotonic()
    deadline: float  # the time budget, as time.time(): tasks compare against it too
    rescore_before: datetime | None
    filters: ClaimFilters  # what the run claims and counts, with its read plan
    pending: int = 0
    unusable: Any = None  # the future of the unusable rows' count
    epochs: list | None = None  # judge epochs the run started
    notes: list[str] = field(default_factory=list)  # said at its start (another source's results here)
    ranged: bool = False  # --since/--until or re-scoring: exactly that range, no watermark, no sample
    sample: Any = None  # tonight's sample plan under a sample budget (judgeflow/sampling/), or None
    night_id: str | None = None  # a shard's: its parent's flow run id, the key of the night's shared ledger
    night: NightLimits | None = None  # a shard's: what its parent set for the whole night
    session_metrics: list[str] = field(default_factory=list)  # level "session": judged over conversations
    quiet: list = field(default_factory=list)  # the sessions that went quiet and changed (tasks/sessions.py)

    @property
    def sessions_pending(self) -> int:
        """(session, metric) pairs this run may judge: an upper bound, pairs done drop out as claimed."""
        return len(self.quiet) * len(self.session_metrics)


def _start(settings: Settings, metrics: list[str], *, limit: int | None, since, until, sample_rate: float,
           rescore: bool, retry_failed: bool, night_id: str | None = None, night: NightLimits | None = None,
           session_metrics: list[str] = ()) -> _Run:
    run_id = str(flow_run.get_id() or uuid.uuid4())
    run_started = datetime.now(timezone.utc)
    # run_started: a pair this run has written is done for this run whatever
    # its status, so a second copy of a duplicate id never gets a second go
    filters = ClaimFilters(
        since=since, until=until, sample_rate=sample_rate, rescore_before=run_started if rescore else None,
        settle_delay_s=settings.settle_delay_s, run_started=run_started,
        max_failed_runs=None if retry_failed else settings.max_runs_per_pair,
        # a run without batches leaves a pair waiting in a live batch to the batch run that collects it
        batch_window_s=None if settings.judge_batch else settings.judge_batch_window_s,
    )
    run = _Run(settings, metrics, run_id, f"{run_id}:{uuid.uuid4().hex[:8]}", time.monotonic(),
               time.time() + settings.max_run_duration_s, filters.rescore_before, filters, night_id=night_id, night=night)
    run.notes = ensure_schema(settings)  # another source's results in this database are announced
    run.ranged = since is not None or until is not None or rescore
    plan = plan_source_reads(settings, metrics, sample_rate=sample_rate, ranged=run.ranged)
    # a nightly run leaves the traces a sample budget did not select to backfills;
    run.filters = replace(filters, plan=plan, not_sampled_done=not run.ranged)
    # with a budget it plans tonight's sample before any judge call (judgeflow/sampling/); a shard's parent did
    if run.night is not None:
        _follow_night_sample(run, plan)
    elif settings.sample_budget_usd is not None and not run.ranged:
        run.sample = plan_night_sample(settings, plan, metrics, since=since, until=until, sample_rate=sample_rate,
                                       flow_run_id=run_id)
        # the night's own selected traces are claimed first, in rank order (judgeflow/sampling/order.py)
        run.filters = replace(run.filters, sample_night=run.sample.night)
        _read_from_selected(run)
    # a report for the summary, not a precondition: counted while the run starts
    # scoring, over the rows the run reads (all of them when it has no window)
    window_start = plan.lo if plan.lo is not None else since
    run.unusable = count_unusable_rows.submit(settings, window_start, window_start is None)
    run.pending = count_pending_work(settings, metrics, run.filters, limit=limit)
    if not run.ranged:  # every nightly run finds them, with or without a session metric to judge them
        run.quiet = find_quiet_sessions(settings)
        run.session_metrics = list(session_metrics) if run.quiet else []
    return run


def _follow_night_sample(run: _Run, plan) -> None:
    """A shard under its parent's sample plan: the night's selected traces first, read from the oldest
    it selected; the shard enters the sample ledger on its own before it judges."""
    night = run.night
    if night.sample_night is None:
        return
    run.filters = replace(run.filters, sample_night=night.sample_night)
    if night.reads_from is not None and plan.lo is not None and night.reads_from < plan.lo:
        run.filters = replace(run.filters, plan=replace(plan, lo=night.reads_from))
    enter_shard_spend(run.settings, night.sample_night, run.run_id, night.sample_budget_usd, None)


def _summary(run: _Run, totals: SummaryBuilder, left: dict[str, int] | None, extra_notes: list[str] = ()
             ) -> RunSummary:
    summary = totals.build(duration_s=time.monotonic() - run.started, flow_run_id=run.run_id,
                           pending_at_start=run.pending, left_to_other_runs=left)
    unusable = run.unusable.result()  # never raises: None when the rows could not be counted
    notes = unusable_notes(run.settings, unusable)
    return summary.model_copy(update={
        "unusable_rows": None if unusable is None else unusable.as_dict(), "notes": [*run.notes, *notes, *extra_notes],
        "judge_epochs": run.epochs or [], "online_cost_usd": online_cost(run.settings, totals),
    })


@contextmanager
def _summary_if_stopped(run: _Run, totals: SummaryBuilder, schedule: RunSchedule):
    """A run stopped by an infrastructure failure (the database gone for
    longer than the retries ride out) lets the work in flight finish, says
    what it did and what it left, then fails."""
    try:
        yield
    except Exception as error:
        schedule.drain()
        summary = _summary(run, totals, {}, [stopped_early(error)])
        try:
            publish_run_summary(summary)
        except Exception as publish_error:
            get_run_logger().warning("could not publish the run summary: %s", publish_error)
        raise


def _claim(run: _Run, keeper: LeaseKeeper, room: int, cursor: Cursor | None) -> ClaimedBatch:
    """The run's next batch, claimed under the keeper's current run lock key."""
    return claim_traces(run.settings, run.owner, run.metrics, room, cursor=cursor, filters=run.filters,
                        owner_key=keeper.owner_key)


def _first_done(futures: list[PrefectFuture]) -> PrefectFuture:
    return next(as_completed(futures))


def _cancel(future: PrefectFuture) -> None:
    future.wrapped_future.cancel()  # only succeeds for a task still queued


def _schedule(run: _Run, batch_size: int, limit: int | None, policy: RunPolicy, totals: SummaryBuilder,
              progress: Progress, judge: PrefectFuture | None) -> RunSchedule:
    submit = functools.partial(_submit_batch, score_batch, run.settings, run.owner, run.run_id, run.rescore_before,
                               policy, judge)
    night = NightTraces(engine_for(run.settings), run.night_id) if run.night_id and limit is not None else None
    return RunSchedule(submit=submit, first_done=_first_done, cancel=_cancel, policy=policy, totals=totals,
                       bounds=bounds_for(run.settings, batch_size, limit, len(run.metrics)), progress=progress,
                       log=get_run_logger(), night=night)


def _submit_batch(task, settings, owner, run_id, rescore_before, policy, judge, items, claimed_at):
    return task.submit(items, settings, owner, flow_run_id=run_id, rescore_before=rescore_before, policy=policy,
                       claimed_at=claimed_at, judge=judge)


def score_traces(
    settings: Settings, *, batch_size: int | None, limit: int | None, since: datetime | None,
    until: datetime | None, sample_rate: float, metrics: list[str], rescore: bool, retry_failed: bool = False,
    cancel_batches: bool = False, night: str | None = None,
) -> RunSummary:
    """The body shared by the nightly and the backfill flows: one task per
    claimed batch, whose pairs run concurrently in-process, each retried on
    the same schedule and failing alone; the task run is named for its trace
    ids (searchable on the run's Task Runs tab) and publishes a table artifact
    with a row per pair. A pair that ended 'failed' in
    ``JUDGEFLOW_MAX_RUNS_PER_PAIR`` runs is given up unless ``retry_failed``.
    Through the batch API (``JUDGEFLOW_JUDGE_BATCH``) a stop or the time
    budget leaves the batches out, unless ``cancel_batches``. ``night``: a
    shard's parent flow run id; the trace limit and the spend budget are then
    the night's, held with the sibling shards (judgeflow/db/night_ledger.py)."""
    check_names(metrics)  # an unknown one: one line naming the registered metrics
    # trace metrics are paired with traces, session metrics with quiet sessions (_judge_sessions)
    session_metrics, metrics = at_level(metrics, "session"), at_level(metrics, "trace")
    batch_size = checked_batch_size(settings, sample_rate, batch_size)
    limits = read_night_limits(settings, night) if night is not None else None
    limit = limits.trace_limit if limits is not None else limit
    run = _start(settings, metrics, limit=limit, since=since, until=until, sample_rate=sample_rate,
                 rescore=rescore, retry_failed=retry_failed, night_id=night, night=limits,
                 session_metrics=session_metrics)
    get_run_logger().info("%d (trace, metric) pairs pending in %s", run.pending, trace_source(settings).display)
    # The keeper releases the run's claims on the way out, also when a task or
    # the database failed: only once nothing still judges or writes under them.
    keeper = LeaseKeeper(settings, run.owner, before_release=lambda: schedule.cancel_and_wait())
    policy = RunPolicy.for_run(settings, run.owner, deadline=run.deadline, keeper=keeper, budget=_budget(run))
    _prepare(run, limit, policy)
    judging = run.pending + run.sessions_pending
    # a new judge model or metric version starts a judge epoch: before the first result is written
    every = run.metrics + run.session_metrics
    run.epochs = record_judge_epochs(settings, every, flow_run_id=run.run_id) if judging else []
    judge_started, batched = _judges(run, policy, judging, cancel_batches)
    totals = SummaryBuilder()
    progress = Progress(judging, every=batch_size, flow_run_id=run.run_id,
                        budget_usd=policy.budget.limit_usd if policy.budget is not None else None)
    schedule = _schedule(run, batch_size, limit, policy, totals, progress, batched or judge_started)
    with keeper, _summary_if_stopped(run, totals, schedule):
        ended = schedule.run(functools.partial(_claim, run, keeper))
        # the quiet sessions before the top-ups: under a sample budget they are sampled to what the
        # night's selected traces left (judgeflow/sampling/sessions.py), and the top-ups spend the rest
        ended = _judge_sessions(run, schedule, ended, keeper, totals, policy)
        ended = _top_ups(run, schedule, policy, ended, functools.partial(_claim, run, keeper))
        # what other live runs hold once this one claims no more: counted while its last batches finish
        left_counted = count_left_to_other_runs.submit(settings, run.owner, metrics, run.filters)
        schedule.finish()
        # stopped while its last pairs were waiting (on batches out, say): a stopped run all the same
        ended = STOPPED if policy.stop.requested() else ended
        progress.show()  # a run that claimed nothing has its artifact too
        left = left_counted.result()
        # past what is now scored, never past a pair still without a result
        # (claims still held here, this run's unscored ones included)
        advance_watermark(settings, run.filters.plan, metrics, sample_rate=sample_rate, flow_run_id=run.run_id)
    _close_judges(run, judge_started, batched)
    prepaid, prepaid_notes = paid_before(batched)
    totals.less_paid_before(prepaid)  # this run's cost is what it billed; the rows carry what they cost
    notes = [*_end_notes(run, ended, policy), *batches_left_out(batched), *prepaid_notes]
    return _finish(run, _summary(run, totals, left, notes), ended, policy.budget, progress)


def _judges(run: _Run, policy: RunPolicy, judging: int, cancel_batches: bool):
    """The run's judge (litellm's import, judge worker processes: seconds) only when there is work
    for it, built while the first batch is claimed; or its batch judge (``JUDGEFLOW_JUDGE_BATCH``)."""
    settings = run.settings
    judge_started = start_judge.submit(settings) if judging and not settings.judge_batch else None
    batched = start_batch_judge(settings, policy, run.owner, run.run_id, cancel_on_stop=cancel_batches) \
        if settings.judge_batch and judging else None
    if batched is not None:
        watch_batches(batched.waits)  # while it waits on the provider no pair ends: the display shows the wait
    return judge_started, batched


def _judge_sessions(run: _Run, schedule: RunSchedule, ended: str, keeper: LeaseKeeper,
                    totals: SummaryBuilder, policy: RunPolicy) -> str:
    """The quiet sessions' (session, metric) pairs, once the traces are claimed, through the same
    schedule (budget, stop, time), batches and results store as trace pairs; under a sample budget
    a sample of the sessions, fitted to what the run's budget has left (judgeflow/sampling/sessions.py).
    Then the sessions whose pairs are all done get their session rates (no judge call) and are marked
    judged. A run that ended before it claimed them (a stop, the time or spend budget, during the traces
    or the session pairs) marks none; a stop after the last claim leaves a session whose pairs were not
    all answered due (mark_sessions_judged marks only a session every session metric has a result for)."""
    if ended != DONE or not run.quiet:
        return ended
    judged = run.quiet
    if run.session_metrics:
        sampled = run.sample is not None and run.sample.budget_usd is not None and policy.budget is not None
        if sampled:
            schedule.finish()  # what the traces in flight billed is spent before what is left is sampled
        judged = sample_quiet_sessions(run.settings, run.quiet, run.session_metrics,
                                       budget=policy.budget if sampled else None,
                                       night=run.sample.night if sampled else None, flow_run_id=run.run_id)
        schedule.again()
        ended = schedule.run(lambda room, cursor: claim_sessions(
            run.settings, run.owner, judged, run.session_metrics, room, cursor, owner_key=keeper.owner_key))
        schedule.finish()  # stored before they are marked: a stop here leaves them due, their pairs done
    if ended == DONE:
        # every session metric served, not only this run's (--metric): a session is judged once all have judged it
        # rates before the mark: a stop between the two leaves the sessions due, and storing the
        # same rates again changes nothing (tasks/session_rates.py)
        totals.add_session_rates(store_session_rates(run.settings, [q.session_id for q in run.quiet]))
        # the sessions a sample left out are decided out already (sample_quiet_sessions)
        mark_sessions_judged(run.settings, judged, at_level(chosen(None), "session"))
    return ended


def _close_judges(run: _Run, judge_started, batched) -> None:
    """The judges the run started, closed once nothing judges under its claims."""
    if judge_started is not None:
        close_judge(judge_started.result())  # an entry point's judge stays open for it to close
    if batched is not None:
        batched.close()
    reuse.in_flight.forget(run.owner)  # identical pairs of this run were coalesced through it


def _top_ups(run: _Run, schedule: RunSchedule, policy: RunPolicy, ended: str, claim) -> str:
    """Under a sample budget, a run that judged all it selected with budget
    left plans that again at tonight's prices and judges what that selects
    (judgeflow/sampling/planner.py), up to ``TOP_UP_PASSES`` times."""
    for _ in range(TOP_UP_PASSES):  # each spends most of what is left: a few reach the budget
        if ended != DONE or run.sample is None or policy.budget is None or run.sample.budget_usd is None:
            break
        schedule.finish()  # what is in flight is billed before the money left is planned
        f = run.filters
        if not top_up_night_sample(run.settings, run.sample, f.plan, run.metrics, since=f.since, until=f.until,
                                   sample_rate=f.sample_rate, flow_run_id=run.run_id):
            break
        _read_from_selected(run)
        schedule.again()
        ended = schedule.run(claim)
    return ended


def _read_from_selected(run: _Run) -> None:
    """A larger budget or a top-up selected traces behind the watermark: the run reads from the oldest."""
    plan = run.filters.plan
    if run.sample.reads_from is not None and plan.lo is not None and run.sample.reads_from < plan.lo:
        run.filters = replace(run.filters, plan=replace(plan, lo=run.sample.reads_from))


def _budget(run: _Run) -> RunBudget | None:
    """The run's one spend budget: its own, or what is left of the night's sample budget when smaller;
    a shard's is its night's, charged in the ledger its siblings share (its own setting is its parent's)."""
    if run.night is not None:
        limit = run.night.budget_usd
        return spend_budget(run.settings, limit, why=f"the night's budget of ${limit:g} is set",
                            night=NightSpend(engine_for(run.settings), run.night_id)) if limit is not None else None
    night = run.sample
    if night is None:
        return run_budget(run.settings)
    return run_budget(run.settings, night.run_limit_usd, night.budget_usd)


def _prepare(run: _Run, limit: int | None, policy: RunPolicy) -> None:
    """Metrics that need something from the judge once (G-Eval steps) get it before
    the run's epochs are recorded; one the judge could not prepare is left out of
    this run, its pairs pending (the watermark keeps waiting for them)."""
    wanted = run.metrics + run.session_metrics
    if not (run.pending or run.session_metrics) or not unprepared(wanted):
        return
    prepared = prepare_metrics(run.settings, wanted, policy)
    run.notes.extend(prepared.notes)
    ready = set(prepared.ready)
    run.session_metrics = [m for m in run.session_metrics if m in ready]
    if [m for m in run.metrics if m in ready] != run.metrics:
        run.metrics = [m for m in run.metrics if m in ready]
        run.pending = count_pending_work(run.settings, run.metrics, run.filters, limit=limit) if run.metrics else 0


def _end_notes(run: _Run, ended: str, policy: RunPolicy) -> list[str]:
    if ended == ACCOUNT and policy.account is not None and policy.account.gone is not None:
        return [policy.account.gone.why]
    if ended != DEADLINE:
        return []
    note = time_budget_spent(run.settings, time.monotonic() - run.started)
    get_run_logger().warning(note)
    return [note]


def _finish(run: _Run, summary: RunSummary, ended: str, budget: RunBudget | None, progress: Progress
            ) -> RunSummary:
    """The run's last words: its summary completed, published and announced."""
    summary.stopped = ended == STOPPED
    if run.sample is not None:
        summary.notes.extend(publish_sample_plan(run.settings, run.sample, run.run_id,
                                                 spent_usd=budget.spent_usd if budget else 0.0).notes())
    elif run.night is not None and run.night.sample_night is not None:
        enter_shard_spend(run.settings, run.night.sample_night, run.run_id, run.night.sample_budget_usd,
                          budget.spent_usd if budget else 0.0)  # its own part of the night's spend
    elif run.ranged and summary.scored:
        reweigh_sampled_nights(run.settings)  # a backfill may have judged traces a sample left out
    if summary.deferred:
        summary.notes.append(deferred_note(run.settings, summary.deferred, summary.stopped))
    if budget is not None:
        summary.budget_usd = budget.limit_usd
        summary.budget_spent_usd = round(budget.spent_usd, 6)
        if budget.exhausted or ended == BUDGET:
            summary.budget_exhausted = True
            # counted after the run released its claims: what the next run will find
            summary.left_pending = count_pending_work(run.settings, run.metrics, run.filters, limit=None)
    if run.settings.source == "phoenix" and run.settings.phoenix_write_back:
        # after the results are stored; the results table stays the source of truth
        summary.notes.append(write_scores_to_phoenix(run.settings, summary.flow_run_id).note)
    summary.duration_s = round(time.monotonic() - run.started, 2)  # the whole run, the write-back included
    progress.finish()
    publish_run_summary(summary)
    if summary.budget_exhausted:
        announce_budget_exhausted(summary)
    return summary


@contextmanager
def _alerts_also_if_failed(settings: Settings, evaluate_alerts: bool):
    """Alert rules run at the end of every run, also one that stopped part-way:
    what it did score counts, and a run failing every night must not hide a
    regression. The run then ends Failed with its own error."""
    from judgeflow.tasks.alerting import evaluate_alert_rules

    try:
        yield
    except Exception:
        if evaluate_alerts:
            try:
                evaluate_alert_rules(settings)
            except Exception as alert_error:
                get_run_logger().error("alert rules could not be evaluated either: %s", alert_error)
        raise


@flow(name="score-new-traces", flow_run_name=_run_name, task_runner=ThreadPoolTaskRunner(max_workers=MAX_THREADS))
def score_new_traces(
    batch_size: int | None = None,
    limit: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    sample_rate: float = 1.0,
    metrics: list[str] | None = None,
    max_concurrency: int | None = None,
    evaluate_alerts: bool = True,
    judge_processes: int | None = None,
    settle_delay: str | None = None,
    budget_usd: float | None = None,
    retry_failed: bool = False,
    sample_budget_usd: float | None = None,
    batch: bool | None = None,
    cancel_batches: bool = False,
    shards: int = 1,
    shard_deployment: str | None = None,
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
    sampled (docs/running.md). ``batch`` overrides ``JUDGEFLOW_JUDGE_BATCH``:
    the judge calls go through the provider's batch API (about half the
    price; the run waits on its batches within its time budget, which then
    stay out for the next run unless ``cancel_batches``). ``shards`` > 1: the
    night as child flow runs of ``shard_deployment``, flows/fan_out.py."""
    settings = run_settings(max_concurrency=max_concurrency, judge_processes=judge_processes,
                             settle_delay=settle_delay, run_budget_usd=budget_usd,
                             sample_budget_usd=sample_budget_usd, judge_batch=batch)
    from judgeflow.tasks.alerting import evaluate_alert_rules

    check_shards(settings, shards)
    scope = dict(batch_size=batch_size, since=since, until=until, sample_rate=sample_rate, retry_failed=retry_failed)
    with _alerts_also_if_failed(settings, evaluate_alerts):
        if shards > 1:  # each child is handed the night's scope and its judge's settings
            summary = score_in_shards(settings, shards, shard_deployment, dict(scope, metrics=metrics,
                max_concurrency=max_concurrency, judge_processes=judge_processes, settle_delay=settle_delay), limit=limit)
        else:
            summary = score_traces(settings, **scope, limit=limit, metrics=chosen(metrics), rescore=False,
                                   cancel_batches=cancel_batches)
    if evaluate_alerts:
        evaluate_alert_rules(settings, flow_run_id=summary.flow_run_id)
    from judgeflow.tasks.trend import publish_trend

    publish_trend(settings)
    return summary
