"""The shadow sample: recent results of the judge in force, stratified per segment.

Each (metric, segment value) stratum gets ``per_segment`` results, or all it
has when it has fewer, chosen by a seeded hash of the trace id: the same seed
picks the same traces, so the cost shown before asking is the cost of the run
that follows. Only results the judge in force scored ('scored', of its epoch:
:mod:`judgeflow.db.epochs`) are candidates: they are what the candidate is
compared with. Traces whose metadata lacks the key form the stratum ``(none)``.

A session metric's results (``level = "session"``) are sampled the same way from its results alone
(a session has no one source row to join; its stratum is the result's own segment value), only those
that saw the session's turns as they are now (a session that grew since is not the conversation its
score is about); :func:`add_conversations` then reads each sampled session's conversation as session
judging reads it (judgeflow/db/sessions.py ``conversations``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from judgeflow.sources.table import SourceTable
from judgeflow.db.epochs import current_epochs, in_epoch_sql
from judgeflow.sources.identity import of_source
from judgeflow.errors import ConfigError, DatabaseError
from judgeflow.metrics.registry import at_level
from judgeflow.model import TraceWork

NO_SEGMENT = "(none)"


class CurrentResult(BaseModel):
    """What the judge in force said about a pair, copied into the shadow row."""

    metric_version: str | None = None
    judge_model: str | None = None
    status: str
    score: float | None = None
    passed: bool | None = None
    reason: str | None = None
    judge_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None


class ShadowPair(BaseModel):
    work: TraceWork
    stratum: str  # the segment value ('' when not stratified)
    current: CurrentResult


def select_sample(
    conn: Connection,
    source: SourceTable,
    *,
    metrics: list[str],
    since: datetime,
    segment_by: str | None,
    per_segment: int,
    seed: str,
    result_source: str,
) -> list[ShadowPair]:
    """The stratified sample (see the module doc) of ``result_source``'s results, oldest trace first."""
    if per_segment < 1:
        raise ConfigError("the sample size per segment must be at least 1")
    in_epoch, params = in_epoch_sql(current_epochs(conn, result_source), metrics)
    params.update(since=since, key=segment_by, none=NO_SEGMENT, n=per_segment, seed=seed, source=result_source)
    traces, sessions = at_level(metrics, "trace"), at_level(metrics, "session")
    try:
        rows = _trace_rows(conn, source, traces, segment_by, in_epoch, params) if traces else []
        rows += _session_rows(conn, sessions, segment_by, in_epoch, params) if sessions else []
    except DBAPIError as exc:
        raise DatabaseError(f"could not select the shadow sample: {exc.orig}") from None
    rows.sort(key=lambda r: (r["trace_created_at"], r["trace_id"], r["metric"]))
    return [_pair(r, segment_by) for r in rows]


_RESULT_COLUMNS = """trace_id, metric, trace_created_at, metric_version, judge_model, status, score, passed,
                     reason, judge_calls, prompt_tokens, completion_tokens, cost_usd"""


def _trace_rows(conn: Connection, source: SourceTable, metrics: list[str], segment_by: str | None, in_epoch: str,
                params: dict) -> list:
    available = source.columns(conn)
    select_list = source.select_list(available)
    if segment_by is not None and "metadata" not in available:
        raise ConfigError(f"trace source {source.display!r} has no metadata column to stratify by {segment_by!r}")
    stratum = "coalesce(to_jsonb(t.metadata) ->> :key, :none)" if segment_by else "''"
    return list(conn.execute(text(
        f"""
        WITH done AS (
            SELECT {_RESULT_COLUMNS}
            FROM judgeflow.eval_results
            WHERE metric = ANY(CAST(:metrics AS text[])) AND trace_created_at >= :since
              AND status = 'scored' AND {in_epoch} AND {of_source()}
        ), ranked AS (
            SELECT d.*, {stratum} AS stratum,
                   row_number() OVER (PARTITION BY d.metric, {stratum}
                                      ORDER BY md5(d.trace_id || :seed), d.trace_id) AS rank
            FROM done d JOIN {source.sql} t ON t.id::text = d.trace_id
        ), chosen AS (SELECT * FROM ranked WHERE rank <= :n)
        SELECT c.*, s.input, s.output, s.context, s.metadata, s.created_at, NULL::int AS turns
        FROM chosen c
        JOIN LATERAL (SELECT {select_list} FROM {source.sql} t WHERE t.id::text = c.trace_id LIMIT 1) s ON TRUE
        """
    ), {**params, "metrics": list(metrics)}).mappings().all())


def _session_rows(conn: Connection, metrics: list[str], segment_by: str | None, in_epoch: str,
                  params: dict) -> list:
    stratum = "coalesce(d.segment ->> :key, :none)" if segment_by else "''"
    return list(conn.execute(text(
        f"""
        WITH done AS (
            SELECT {_RESULT_COLUMNS}, segment, (details ->> 'turns')::int AS turns
            FROM judgeflow.eval_results e
            WHERE metric = ANY(CAST(:metrics AS text[])) AND trace_created_at >= :since
              AND status = 'scored' AND {in_epoch} AND {of_source()}
              -- the result saw the session as it is: its conversation is the one read now
              AND (details -> 'turns') = (SELECT to_jsonb(s.turns) FROM judgeflow.sessions s
                                          WHERE s.session_id = e.trace_id)
        ), ranked AS (
            SELECT d.*, {stratum} AS stratum,
                   row_number() OVER (PARTITION BY d.metric, {stratum}
                                      ORDER BY md5(d.trace_id || :seed), d.trace_id) AS rank
            FROM done d
        )
        SELECT r.*, '' AS input, '' AS output, NULL::jsonb AS context, NULL::jsonb AS metadata,
               r.trace_created_at AS created_at
        FROM ranked r WHERE rank <= :n
        """
    ), {**params, "metrics": list(metrics)}).mappings().all())


def add_conversations(conn: Connection, settings, pairs: list[ShadowPair]) -> list[ShadowPair]:
    """``pairs`` with each session's conversation as its context, read from the configured source as
    session judging reads it; trace pairs as they are."""
    from judgeflow.db.engine import source_engine
    from judgeflow.db.sessions import conversations
    from judgeflow.sources.trace_source import trace_source

    ids = list(dict.fromkeys(p.work.trace_id for p in pairs if p.work.turns is not None))
    if not ids:
        return pairs
    read = conversations(conn, trace_source(settings), source_engine(settings), ids)
    return [p.model_copy(update={"work": p.work.model_copy(update={"context": read.get(p.work.trace_id, [])})})
            if p.work.turns is not None else p for p in pairs]


def _pair(r: Any, segment_by: str | None) -> ShadowPair:
    segment = {segment_by: r["stratum"]} if segment_by and r["stratum"] != NO_SEGMENT else {}
    work = TraceWork(
        trace_id=r["trace_id"], metric=r["metric"], created_at=r["created_at"], input=r["input"],
        output=r["output"], context=r["context"], metadata=r["metadata"], segment=segment, turns=r["turns"],
    )
    current = CurrentResult(**{k: r[k] for k in CurrentResult.model_fields})
    return ShadowPair(work=work, stratum=r["stratum"], current=current)


def strata(pairs: list[ShadowPair]) -> dict[tuple[str, str], int]:
    """(metric, stratum) -> pairs in the sample."""
    counts: dict[tuple[str, str], int] = {}
    for p in pairs:
        counts[(p.work.metric, p.stratum)] = counts.get((p.work.metric, p.stratum), 0) + 1
    return counts
