"""Claiming work in PostgreSQL so concurrent runs never score the same
(trace, metric) twice, and the run's reads around it: where it reads the
source (its read plan), what is pending there, and the watermark it moves.

A claim is a row in ``judgeflow.claims`` with a lease and the owner's key. A
run takes unclaimed (or free) pairs with ``INSERT ... ON CONFLICT DO UPDATE
... WHERE the claim is not held``: PostgreSQL serialises conflicting inserts on
the primary key, so of two runs racing for a pair exactly one gets it back
from ``RETURNING``. How a run keeps holding them is
:class:`judgeflow.db.leases.LeaseKeeper`'s job.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from datetime import datetime

from prefect import task
from prefect.cache_policies import NO_CACHE
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from judgeflow.alerts.segments import segment_values
from judgeflow.db.engine import engine_for, source_engine
from judgeflow.db.claim_filters import ClaimFilters
from judgeflow.db.pairs import Done, claim_keys, failed_keys
from judgeflow.db.pending import held
from judgeflow.db.pending_work import count_plan_pending, run_read_plan
from judgeflow.db.results_store import release_pairs
from judgeflow.db.result_counts import compact_result_counts
from judgeflow.sources.table import SAMPLE_SQL
from judgeflow.sources.trace_source import TraceKey, read_bodies, trace_source
from judgeflow.db.watermark import ReadPlan, advance, plan_reads
from judgeflow.sampling.order import selected_waiting
from judgeflow.errors import DatabaseError
from judgeflow.config.settings import Settings
from judgeflow.model import ClaimedBatch, Cursor, TraceWork

log = logging.getLogger("judgeflow.claims")


def _work_items(keys, claimed, read, segment_keys: tuple[str, ...] = ()) -> tuple[list[TraceWork], list]:
    """Our claimed pairs as work, with their trace read by key; a trace that
    could not be read is work carrying the database's error (stored as a
    failed ``invalid_trace`` result). Also the pairs whose trace the source
    no longer shows (deleted, or not yet on a lagging replica): given back."""
    items: list[TraceWork] = []
    gone = []
    for index, metric, mine in claimed:
        if not mine:
            continue
        key = keys[index]
        body = read.bodies.get(key.id)
        if body is not None:
            items.append(TraceWork(
                trace_id=key.id, metric=metric, created_at=body.created_at, input=body.input, output=body.output,
                context=body.context, metadata=body.metadata, segment=segment_values(body.metadata, segment_keys),
                skip_reason=body.skip,
            ))
        elif key.id in read.errors:
            items.append(TraceWork(trace_id=key.id, metric=metric, created_at=key.created_at,
                                   read_error=read.errors[key.id]))
        else:
            gone.append((key.id, metric))
    return items, gone


# keys looked at per source read: a window's already scored rows (the
# look-back) are passed over this many at a time
KEY_PAGE_MIN = 1000


# retries: the task level, for the database (reads only: a dropped connection is read again)
@task(name="plan-source-reads", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def plan_source_reads(
    settings: Settings, metrics: list[str], *, sample_rate: float = 1.0, ranged: bool = False,
) -> ReadPlan:
    """Where this run reads the source from (:func:`judgeflow.db.pending_work.run_read_plan`)."""
    try:
        with engine_for(settings).connect() as conn:
            return run_read_plan(conn, settings, metrics, sample_rate=sample_rate, ranged=ranged)
    except DBAPIError as exc:
        raise DatabaseError(f"could not read the watermarks: {exc.orig}") from None


# retries=0: the next run advances it past the same results
@task(name="advance-watermark", cache_policy=NO_CACHE, persist_result=False, retries=0)
def advance_watermark(
    settings: Settings, plan: ReadPlan, metrics: list[str], *, sample_rate: float = 1.0,
    flow_run_id: str | None = None,
) -> dict[str, datetime | None] | None:
    """Move the watermarks past what is now scored, never past a pair still
    without a result. Never fails the run: None when it could not (the next
    run then reads from the old watermark: more reads, nothing missed)."""
    try:
        with engine_for(settings).begin() as conn:
            # the result counts `judgeflow status` reads: one row per group again
            compact_result_counts(conn)
        with engine_for(settings).begin() as conn:
            return advance(conn, source_engine(settings), trace_source(settings), plan, metrics,
                           sample_rate=sample_rate, flow_run_id=flow_run_id)
    except Exception as error:  # a report: the watermark only ever saves reads
        log.warning("could not move the watermark: %s", error)
        return None


# The phases of a run's reads, in order. Under a sample budget (``sample_night``
# set in its filters) its own night's selected traces come first, in rank order
# (judgeflow/sampling/order.py); then failed pairs older than the window ("retry",
# with a window) and the window's keys (tonight's traces when the night's plan
# judges them all; not the traces an earlier night decided on); last, under a sample budget, the traces earlier nights selected
# and left unjudged, in rank order: they get what tonight's own work leaves over.
PHASES = ("night", "retry", "window", "earlier")
# the sampled phases read their list afresh at each claim: what is claimed or done drops out of it
RANKED = ("night", "earlier")


@dataclass
class _Reads:
    """Where a claim reads its candidate keys: its phase (``PHASES``), the key
    after which it reads, and what it filters on."""

    phase: str
    after: tuple[datetime, str] | None
    filters: ClaimFilters
    lo: datetime | None
    page: int
    ranked: list[TraceKey] | None = None  # a sampled phase's keys, read once per claim


def _first_phase(filters: ClaimFilters, lo: datetime | None) -> str:
    if filters.sample_night is not None:
        return "night"
    return "retry" if lo is not None else "window"


def _next_phase(reads: _Reads) -> str | None:
    """The phase after ``reads.phase`` (None: the reads are over); "retry"
    needs a window, "earlier" a sample budget."""
    later = PHASES[PHASES.index(reads.phase) + 1:]
    return next((p for p in later if (p != "retry" or reads.lo is not None)
                 and (p != "earlier" or reads.filters.sample_night is not None)), None)


def _done(reads: _Reads) -> Done:
    """When a pair counts as done in this phase: in the window, a trace an
    earlier night's sample selected waits for the last phase (a failed pair
    of one is retried in "retry", as any failed pair)."""
    done = reads.filters.done
    if reads.filters.sample_night is not None and reads.phase == "window":
        done = replace(done, decided_before_night=reads.filters.sample_night)
    return done


def _ranked_page(settings: Settings, reads: _Reads) -> list[TraceKey]:
    if reads.ranked is None:
        with engine_for(settings).connect() as conn:
            reads.ranked = selected_waiting(conn, reads.filters.sample_night, earlier=reads.phase == "earlier",
                                            min_first=settings.alert_min_samples)
    start = 0
    if reads.after is not None:
        start = next((i + 1 for i, k in enumerate(reads.ranked) if k.id == reads.after[1]), len(reads.ranked))
    return reads.ranked[start:start + reads.page]


def _candidate_keys(settings: Settings, metrics: list[str], reads: _Reads) -> list[TraceKey]:
    """The next page of keys of the current phase."""
    if reads.phase in RANKED:
        return _ranked_page(settings, reads)
    if reads.phase == "retry":
        with engine_for(settings).connect() as conn:
            return failed_keys(conn, metrics, before=reads.lo, done=reads.filters.done,
                               sample_rate=reads.filters.sample_rate, after=reads.after, limit=reads.page)
    sql, params = trace_source(settings).keys_sql(reads.filters.keys(lo=reads.lo, after=reads.after))
    with source_engine(settings).connect() as conn:
        return [TraceKey(i, at) for i, at in conn.execute(text(sql), {**params, "limit": reads.page}).all()]


def _claim_next(settings: Settings, owner: str, metrics: list[str], reads: _Reads, n_keys: int,
                owner_key: int | None) -> tuple[list[TraceKey], list] | None:
    """Claim on the keys after ``reads.after`` until some are claimed: (the
    keys, the claim results), or None once every phase is read to its end.
    Moves ``reads`` along."""
    while True:
        keys = _candidate_keys(settings, metrics, reads)
        if keys:
            # autocommit, one statement: a process frozen between a statement and
            # its COMMIT would hold the new claims' row locks, and another run
            # trying to take them over would wait on it for as long as it is frozen
            with engine_for(settings).connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                claimed, whole = claim_keys(conn, keys, metrics, n_keys=n_keys, done=_done(reads), owner=owner,
                                            owner_key=owner_key, lease_s=settings.lease_timeout_s)
            last = keys[-1] if whole else keys[max(index for index, _, _ in claimed)]
            reads.after = (last.created_at, last.id)
            if claimed:
                return keys, claimed
            if len(keys) == reads.page:  # more of this phase to read
                continue
        phase = _next_phase(reads)
        if phase is None:
            return None
        reads.phase, reads.after, reads.ranked = phase, None, None


def _with_bodies(settings: Settings, owner: str, keys: list[TraceKey], claimed: list) -> list[TraceWork]:
    """The claimed pairs as work, their traces read by key; claims whose trace
    is gone are given back, and all of them if the read itself fails."""
    source = trace_source(settings)
    mine = [(keys[index].id, metric) for index, metric, is_mine in claimed if is_mine]
    wanted = list(dict.fromkeys(keys[index] for index, _, is_mine in claimed if is_mine))
    try:
        read = read_bodies(source, source_engine(settings), wanted)
    except Exception as exc:
        # not any one row's fault (a lost connection, a missing column): the
        # claims go back at once, and the task's retry (or the next run) reads again
        try:
            release_pairs(settings, mine, owner)
        except Exception:  # they die with the run's lock in any case
            pass
        orig = getattr(exc, "orig", exc)
        raise DatabaseError(f"could not read traces from {source.display}: {type(orig).__name__}: {orig}") from None
    if read.errors:
        log.warning("%d trace(s) of %s could not be read and are recorded as failed: %s", len(read.errors),
                    source.display, "; ".join(f"{k}: {v}" for k, v in list(read.errors.items())[:5]))
    items, gone = _work_items(keys, claimed, read, settings.stored_segment_keys)
    if gone:
        log.info("%d claimed pair(s) whose trace %s no longer shows were given back", len(gone), source.display)
        release_pairs(settings, gone, owner)
    return items


# retries: the task level, for the database (a claim is one transaction: a failed one claimed nothing)
@task(name="claim-traces", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=[2, 5])
def claim_traces(
    settings: Settings,
    owner: str,
    metrics: list[str],
    batch_size: int,
    cursor: Cursor | None = None,
    filters: ClaimFilters = ClaimFilters(),
    owner_key: int | None = None,
) -> ClaimedBatch:
    """Claim up to ``batch_size`` pending (trace, metric) pairs after ``cursor``,
    oldest first, and return them with their trace content. ``owner_key`` is
    the key of the run lock ``owner`` holds (:class:`judgeflow.db.leases.LeaseKeeper`);
    without one the claims live by their lease alone. ``filters``: what the
    run claims, and where it reads (``filters.plan``, :func:`plan_source_reads`;
    None reads the whole source).

    Keys (id and time) are read from the source a page at a time and their
    pairs claimed on judgeflow's database by primary key; then the claimed
    traces are read by key (judgeflow/sources/trace_source.py: a row that cannot be
    read becomes a failed ``invalid_trace`` result, the others are scored).
    Under a sample budget the night's selected traces come first, in rank
    order; with a plan that has a window, failed pairs older than it come
    next (phase "retry", from eval_results), then the window's keys; last,
    under a sample budget, the traces earlier nights selected and left
    unjudged, in rank order (``PHASES``)."""
    n_keys = max(1, math.ceil(batch_size / max(len(metrics), 1)))
    lo = filters.plan.lo if filters.plan is not None else None
    reads = _Reads(
        phase=cursor.phase if cursor is not None else _first_phase(filters, lo),
        # a sampled phase reads its list afresh: what this run claimed or judged is no longer waiting in it
        after=(cursor.created_at, cursor.trace_id) if cursor is not None and cursor.phase not in RANKED else None,
        filters=filters, lo=lo, page=max(4 * n_keys, KEY_PAGE_MIN),
    )
    try:
        found = _claim_next(settings, owner, metrics, reads, n_keys, owner_key)
    except DBAPIError as exc:
        raise DatabaseError(f"could not claim traces: {type(exc.orig).__name__}: {exc.orig}") from None
    if found is None:
        return ClaimedBatch(items=[], cursor=None)
    items = _with_bodies(settings, owner, *found)
    return ClaimedBatch(
        items=items, cursor=Cursor(created_at=reads.after[0], trace_id=reads.after[1], metric="", phase=reads.phase)
    )


# retries: the task level, for the database (reads only)
@task(name="count-pending-work", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def count_pending_work(
    settings: Settings,
    metrics: list[str],
    filters: ClaimFilters = ClaimFilters(),
    limit: int | None = None,
) -> int:
    """How many (trace, metric) pairs a run would score now, in what it reads
    (``filters.plan``); drives the progress artifact."""
    plan = filters.plan
    if plan is None:
        with engine_for(settings).connect() as conn:
            plan = plan_reads(conn, trace_source(settings), metrics, lookback_s=settings.source_lookback_s,
                              sample_rate=filters.sample_rate, ranged=True)
    try:
        counts = count_plan_pending(
            trace_source(settings), source_engine(settings), engine_for(settings), plan, metrics,
            done=filters.done, limit_pairs=None if limit is None else limit * len(metrics),
            since=filters.since, until=filters.until, sample_rate=filters.sample_rate,
            settle_delay_s=filters.settle_delay_s,
        )
    except DBAPIError as exc:
        raise DatabaseError(f"could not count pending traces: {exc.orig}") from None
    return sum(counts.values())


# retries=0: a figure for the summary, read once
@task(name="count-pairs-left-to-other-runs", cache_policy=NO_CACHE, persist_result=False, retries=0)
def count_left_to_other_runs(
    settings: Settings,
    owner: str,
    metrics: list[str],
    filters: ClaimFilters = ClaimFilters(),
) -> dict[str, int] | None:
    """Pairs of these metrics (in the sample), still without a done result,
    that other live runs hold: {flow run id: pairs}; read from the claims
    alone (no source read: a claim does not keep its trace's time, so
    --since/--until do not narrow it). None when the database cannot say
    (the summary then says so rather than claiming nothing was left)."""
    cond, params = filters.done.sql()
    params.update(metrics=list(metrics), owner=owner)
    sample = ""
    if filters.sample_rate < 1.0:
        sample = " AND " + SAMPLE_SQL.format(id="c.trace_id")
        params["rate"] = filters.sample_rate
    try:
        with engine_for(settings).connect() as conn:
            rows = conn.execute(
                text(
                    f"""
                    SELECT split_part(c.owner, ':', 1) AS run, count(*)
                    FROM judgeflow.claims c
                    WHERE c.metric = ANY(CAST(:metrics AS text[])) AND c.owner <> :owner AND {held("c")}{sample}
                      AND NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r
                                      WHERE r.trace_id = c.trace_id AND r.metric = c.metric AND {cond})
                    GROUP BY 1 ORDER BY 1
                    """
                ),
                params,
            ).all()
    except DBAPIError as exc:
        log.warning("could not count the pairs other runs hold: %s", exc.orig)
        return None
    return {run: n for run, n in rows}
