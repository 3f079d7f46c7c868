"""Counting the pending (trace, metric) pairs of a run's reads: the window
of its :class:`~judgeflow.db.watermark.ReadPlan` (keys from the source, a
page at a time) and the failed pairs older than it (from eval_results).
Used by a run's progress, `judgeflow score`'s "nothing to do" check and
`judgeflow status`."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine

from judgeflow.db.pairs import Done, count_pending_keys, failed_keys, key_pages
from judgeflow.db.trace_source import KeyFilter, TraceSource
from judgeflow.db.watermark import ReadPlan

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
