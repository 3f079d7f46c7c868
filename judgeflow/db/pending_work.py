"""A run's read plan, and counting the pending (trace, metric) pairs of it:
the window of its :class:`~judgeflow.db.watermark.ReadPlan` (keys from the
source, a page at a time) and the failed pairs older than it (from
eval_results). Used by a run's progress, `judgeflow score`'s "nothing to do"
check (:func:`anything_pending`) and `judgeflow status`."""

from __future__ import annotations

from datetime import datetime

from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine

from judgeflow.db.pairs import Done, count_pending_keys, failed_keys, key_pages
from judgeflow.sources.trace_source import KeyFilter, TraceSource
from judgeflow.db.watermark import ReadPlan, plan_reads

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings

COUNT_PAGE = 20_000


def count_plan_pending(
    source: TraceSource, source_engine: Engine, engine: Engine, plan: ReadPlan, metrics: list[str], *,
    done: Done, since: datetime | None = None, until: datetime | None = None, sample_rate: float = 1.0,
    settle_delay_s: float = 0.0, limit_pairs: int | None = None, exclude_held: bool = True,
) -> dict[str, int]:
    """Pending pairs per metric; stops counting once ``limit_pairs`` are
    found. An id the source holds twice counts once within a page of
    ``COUNT_PAGE`` keys; copies further apart count each (a run scores one)."""
    counts = {m: 0 for m in metrics}

    def full() -> bool:
        return limit_pairs is not None and sum(counts.values()) >= limit_pairs

    def add(keys) -> None:
        with engine.connect() as conn:
            for metric, n in count_pending_keys(conn, keys, metrics, done=done, exclude_held=exclude_held).items():
                counts[metric] += n

    if plan.lo is not None:
        after = None
        while not full():
            with engine.connect() as conn:
                keys = failed_keys(conn, metrics, before=plan.lo, done=done, sample_rate=sample_rate, after=after,
                                   limit=COUNT_PAGE)
            add(keys)
            if len(keys) < COUNT_PAGE:
                break
            after = (keys[-1].created_at, keys[-1].id)
    f = KeyFilter(lo=plan.lo, since=since, until=until, settle_delay_s=settle_delay_s, sample_rate=sample_rate)
    for keys in key_pages(source, source_engine, f, page=COUNT_PAGE):
        if full():
            break
        add(keys)
    if limit_pairs is not None:
        # the first pairs up to the limit (a run with --limit scores no more)
        left = limit_pairs
        for metric in metrics:
            counts[metric] = min(counts[metric], left)
            left -= counts[metric]
    return counts


def run_read_plan(
    conn: Connection, settings: "Settings", metrics: list[str], *, sample_rate: float = 1.0, ranged: bool = False,
) -> ReadPlan:
    """Where a scoring run reads the source from: its watermark minus the
    look-back, or everything (no watermark yet), or exactly its
    --since/--until range (``ranged``); never traces younger than the settle delay."""
    from judgeflow.sources.trace_source import trace_source

    return plan_reads(conn, trace_source(settings), metrics, lookback_s=settings.source_lookback_s,
                      sample_rate=sample_rate, settle_delay_s=settings.settle_delay_s, ranged=ranged)


def anything_pending(
    settings: "Settings", metrics: list[str], *, since: datetime | None = None, until: datetime | None = None,
    sample_rate: float = 1.0, rescore: bool = False, retry_failed: bool = False,
) -> bool:
    """Whether a scoring run started now with these arguments would find a
    pair to score: its own read plan (:func:`run_read_plan`) and its own
    definition of done, counted up to the first pending pair. Raises what the
    database raises (SQLAlchemy's errors, :class:`~judgeflow.errors.JudgeflowError`)."""
    from judgeflow.db.engine import engine_for, source_engine
    from judgeflow.sources.trace_source import trace_source

    engine = engine_for(settings)
    ranged = since is not None or until is not None or rescore
    with engine.connect() as conn:
        plan = run_read_plan(conn, settings, metrics, sample_rate=sample_rate, ranged=ranged)
    # a nightly run leaves the traces a sample budget did not select to backfills
    done = Done(max_failed_runs=None if retry_failed else settings.max_runs_per_pair, not_sampled_done=not ranged)
    counts = count_plan_pending(
        trace_source(settings), source_engine(settings), engine, plan, metrics, done=done, since=since,
        until=until, sample_rate=sample_rate, settle_delay_s=settings.settle_delay_s, limit_pairs=1,
    )
    return sum(counts.values()) > 0
