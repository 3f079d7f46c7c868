"""The session rates' SQL: the turns' results of given sessions, read in one query per batch, and the
rates written as eval_results rows.

A session rate's row is a session's result like any other (trace_id = the session's result id,
judgeflow/sources/session_id.py; trace_created_at = its last turn; the session's source). A row written
(new, or different from the stored one: the session grew, or a turn's score changed) is appended to the
session's history, ``judgeflow.session_scores``, by that table's trigger (migration 25_session_scores.py),
as every session score is; an equal row is left alone and adds no entry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

# Every turn of each session, in turn order, with its results of the given trace metrics (a turn
# without one: a row of NULLs). Reads the turns through session_turns' (session_id, created_at,
# trace_id) index and each result by eval_results' key.
_TURN_RESULTS = text(
    """
    SELECT s.session_id, s.source, s.last_turn_at, t.trace_id, r.metric, r.status, r.passed, r.segment
    FROM judgeflow.sessions s
    JOIN judgeflow.session_turns t ON t.session_id = s.session_id AND t.source = s.source
    LEFT JOIN judgeflow.eval_results r
      ON r.trace_id = t.trace_id AND r.metric = ANY(CAST(:metrics AS text[]))
     AND (r.source = s.source OR r.source IS NULL)
    WHERE s.session_id = ANY(CAST(:ids AS text[]))
    ORDER BY s.session_id, t.created_at, t.trace_id
    """
)
_ROW = ("trace_id text, metric text, metric_version text, score float8, passed boolean, threshold float8, "
        "reason text, details jsonb, trace_created_at timestamptz, segment jsonb, source text, flow_run_id text")
_UPSERT = text(
    f"""
    INSERT INTO judgeflow.eval_results AS r
        (trace_id, metric, metric_version, status, score, passed, threshold, reason, details, judge_model,
         cost_usd, latency_ms, judge_calls, attempts, flow_run_id, trace_created_at, segment, source, scored_at)
    SELECT trace_id, metric, metric_version, 'scored', score, passed, threshold, reason, details, NULL,
           0, 0, 0, 0, flow_run_id, trace_created_at, COALESCE(segment, '{{}}'::jsonb), source, now()
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x({_ROW})
    ON CONFLICT (trace_id, metric) DO UPDATE SET
        metric_version = excluded.metric_version, status = excluded.status, score = excluded.score,
        passed = excluded.passed, threshold = excluded.threshold, reason = excluded.reason,
        details = excluded.details, judge_model = NULL, cost_usd = 0, judge_calls = 0, error = NULL,
        error_kind = NULL, flow_run_id = excluded.flow_run_id, trace_created_at = excluded.trace_created_at,
        segment = excluded.segment, source = excluded.source, scored_at = now(),
        -- a changed result is written back to Phoenix again (judgeflow/phoenix/outbox.py)
        written_back_at = NULL, write_back_error = NULL, write_back_tries = 0, write_back_next_at = NULL
    WHERE (r.score, r.passed, r.threshold, r.details, r.status, r.trace_created_at)
          IS DISTINCT FROM (excluded.score, excluded.passed, excluded.threshold, excluded.details, excluded.status,
                            excluded.trace_created_at)
    RETURNING r.trace_id, r.metric
    """
)


@dataclass
class SessionTurns:
    """One session as its rates read it: its source, last turn, and per trace metric each turn's
    (status, passed) in turn order (None, None: no result), and the latest turn's segment."""

    session_id: str
    source: str
    last_turn_at: datetime
    turns: list[str] = field(default_factory=list)
    results: dict[tuple[str, str], tuple[str | None, bool | None]] = field(default_factory=dict)
    segment: dict[str, Any] = field(default_factory=dict)


def read_session_turns(conn: Connection, session_ids: Sequence[str], metrics: Sequence[str]) -> list[SessionTurns]:
    """The sessions ``session_ids`` (those recorded), each with its turns' results of ``metrics``: one query."""
    sessions: dict[str, SessionTurns] = {}
    rows = conn.execute(_TURN_RESULTS, {"ids": list(session_ids), "metrics": list(metrics)}).all()
    for session_id, source, last_turn_at, trace_id, metric, status, passed, segment in rows:
        session = sessions.setdefault(session_id, SessionTurns(session_id, source, last_turn_at))
        if not session.turns or session.turns[-1] != trace_id:
            session.turns.append(trace_id)
        if metric is not None:
            session.results[(trace_id, metric)] = (status, passed)
            if segment:
                session.segment = segment  # turns in order: the latest turn's segment wins
    return list(sessions.values())


def store_session_rows(conn: Connection, rows: list[dict[str, Any]], *, owner: str) -> set[tuple[str, str]]:
    """Upsert session rate rows (keys as in ``_ROW``; each one written enters the session's history by
    the trigger); returns the (session id, metric) pairs written (a row equal to the stored one is left alone)."""
    if not rows:
        return set()
    params = {"rows": json.dumps(rows, default=str)}
    return {(t, m) for t, m in conn.execute(_UPSERT, params).all()}
