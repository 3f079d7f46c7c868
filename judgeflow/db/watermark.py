"""The watermark: how a nightly run reads only new work, not the history.

Per source, metric and scope (the sample rate), ``judgeflow.watermarks``
keeps ``scored_through``: every source row (with an id, in the sample)
created before it has a result row for the metric, of any status. A run
reads keys from ``min(watermarks) - JUDGEFLOW_SOURCE_LOOKBACK`` on, through
the source's created_at index (:class:`ReadPlan`), and failed pairs older
than that from ``eval_results`` (judgeflow/db/pairs.py: ``failed_keys``). At
its end (:func:`advance`) it reads that window's keys again, oldest first,
and moves each metric's watermark to the first key that still has no result
(held by a live run, left by ``--limit``, a budget or the time budget) or, if
there is none, to the newest key it saw, never past the time the run started
(the database's clock, minus the settle delay). Results are never deleted,
so a watermark stays true, except for rows that appear later with an older
created_at: the look-back catches those up to its length.

Runs with ``--since/--until`` or re-scoring read exactly their range and
neither use nor move a watermark. Without a watermark (the first run on a
source, or with another sample rate) the window is the whole source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection, text

from judgeflow.sources.trace_source import KeyFilter, TraceSource

ADVANCE_PAGE = 5000


def scope_of(sample_rate: float) -> str:
    return f"sample={sample_rate!r}"


@dataclass(frozen=True)
class ReadPlan:
    """What a run reads, decided once at its start."""

    source: str  # the source's identity
    scope: str
    lo: datetime | None  # the window starts here (created_at >= lo); None: the oldest row
    before: datetime  # the watermark never passes this (the run's start minus the settle delay)
    watermarks: dict[str, datetime | None] = field(default_factory=dict)
    moves: bool = False  # a nightly run: it reads from the watermark and moves it


def read_watermarks(conn: Connection, source: str, scope: str, metrics: list[str]) -> dict[str, datetime | None]:
    rows = dict(
        conn.execute(
            text(
                "SELECT metric, scored_through FROM judgeflow.watermarks "
                "WHERE source = :s AND scope = :scope AND metric = ANY(CAST(:m AS text[]))"
            ),
            {"s": source, "scope": scope, "m": list(metrics)},
        ).all()
    )
    return {m: rows.get(m) for m in metrics}


def plan_reads(
    conn: Connection, source: TraceSource, metrics: list[str], *, lookback_s: float, sample_rate: float = 1.0,
    settle_delay_s: float = 0.0, ranged: bool = False,
) -> ReadPlan:
    """The plan of a run (``ranged``: it has --since/--until or re-scores)."""
    now = conn.execute(text("SELECT now()")).scalar_one()
    before = now - timedelta(seconds=settle_delay_s)
    scope = scope_of(sample_rate)
    if ranged:
        return ReadPlan(source=source.identity, scope=scope, lo=None, before=before, moves=False)
    marks = read_watermarks(conn, source.identity, scope, metrics)
    known = [w for w in marks.values() if w is not None]
    lo = min(known) - timedelta(seconds=lookback_s) if known and len(known) == len(marks) else None
    return ReadPlan(source=source.identity, scope=scope, lo=lo, before=before, watermarks=marks, moves=True)


def advance(
    conn: Connection, source_conn_engine, source: TraceSource, plan: ReadPlan, metrics: list[str], *,
    sample_rate: float = 1.0, flow_run_id: str | None = None,
) -> dict[str, datetime | None]:
    """Move the watermarks of a run that read ``plan`` (see the module doc);
    returns them as stored. ``conn``: judgeflow's database; the source's keys
    are read through ``source_conn_engine``."""
    from judgeflow.db.pairs import first_without_result, key_pages

    if not plan.moves:
        return dict(plan.watermarks)
    found: dict[str, datetime] = {}
    newest: datetime | None = None
    open_metrics = list(metrics)
    f = KeyFilter(lo=plan.lo, before=plan.before, sample_rate=sample_rate)
    for keys in key_pages(source, source_conn_engine, f, page=ADVANCE_PAGE):
        newest = keys[-1].created_at
        for metric, index in first_without_result(conn, keys, open_metrics).items():
            found[metric] = keys[index].created_at
        open_metrics = [m for m in open_metrics if m not in found]
        if not open_metrics:
            break
    marks: dict[str, datetime | None] = {}
    for metric in metrics:
        mark = found.get(metric, newest)
        if mark is None:  # the window held no key at all: nothing learnt
            marks[metric] = plan.watermarks.get(metric)
            continue
        marks[metric] = mark
        conn.execute(
            text(
                """
                INSERT INTO judgeflow.watermarks (source, metric, scope, scored_through, updated_at, flow_run_id)
                VALUES (:s, :m, :scope, :w, now(), :run)
                ON CONFLICT (source, metric, scope) DO UPDATE
                    SET scored_through = excluded.scored_through, updated_at = now(), flow_run_id = excluded.flow_run_id
                """
            ),
            {"s": plan.source, "m": metric, "scope": plan.scope, "w": mark, "run": flow_run_id},
        )
    return marks
