"""Sessions seeded straight into the test database: judgeflow.sessions, their session_turns and the
turns' eval_results rows, as the session flow and scoring would have left them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import sqlalchemy as sa

from judgeflow.sources.session_id import session_result_id


def seed_session(conn, source: str, key: str, start: datetime, turns: dict[str, list[bool | None]], *,
                 gap: timedelta = timedelta(minutes=1), segment: dict | None = None) -> str:
    """Session ``key`` of ``source``: ``turns`` maps a trace metric to each turn's ``passed`` (True,
    False; None: the turn has no result of it); the turns start at ``start``, ``gap`` apart. Returns the
    session's result id."""
    count = max(len(passes) for passes in turns.values())
    session_id = session_result_id(source, key)
    times = [start + gap * i for i in range(count)]
    conn.execute(sa.text(
        "INSERT INTO judgeflow.sessions (session_id, source, session_key, first_turn_at, last_turn_at, turns) "
        "VALUES (:s, :source, :key, :first, :last, :n)"),
        {"s": session_id, "source": source, "key": key, "first": times[0], "last": times[-1], "n": count})
    trace_ids = [f"{key}-t{i}" for i in range(count)]
    conn.execute(sa.text(
        "INSERT INTO judgeflow.session_turns (source, trace_id, session_id, created_at) "
        "SELECT :source, t, :s, c FROM unnest(CAST(:t AS text[]), CAST(:c AS timestamptz[])) AS x(t, c)"),
        {"source": source, "s": session_id, "t": trace_ids, "c": times})
    for metric, passes in turns.items():
        scored = [(t, c, p) for t, c, p in zip(trace_ids, times, passes) if p is not None]
        if scored:
            conn.execute(sa.text(
                "INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed, "
                "threshold, judge_calls, cost_usd, trace_created_at, source, segment) "
                "SELECT t, :m, 'v1', 'scored', CASE WHEN p THEN 0.1 ELSE 0.9 END, p, 0.5, 1, 0.001, c, :source, "
                "CAST(:seg AS jsonb) FROM unnest(CAST(:t AS text[]), CAST(:c AS timestamptz[]), "
                "CAST(:p AS boolean[])) AS x(t, c, p)"),
                {"m": metric, "source": source, "seg": json.dumps(segment or {}), "t": [x[0] for x in scored],
                 "c": [x[1] for x in scored], "p": [x[2] for x in scored]})
    return session_id


def add_result(conn, trace_id: str, metric: str, passed: bool, created: datetime, *, source: str,
               segment: dict | None = None, score: float | None = None) -> None:
    """A scored result of ``metric`` on ``trace_id`` (replacing one stored)."""
    conn.execute(sa.text(
        "INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed, threshold, "
        "judge_calls, cost_usd, trace_created_at, source, segment) VALUES (:t, :m, 'v1', 'scored', :score, "
        ":passed, 0.5, 1, 0.001, :c, :source, CAST(:seg AS jsonb)) ON CONFLICT (trace_id, metric) DO UPDATE SET "
        "passed = excluded.passed, score = excluded.score"),
        {"t": trace_id, "m": metric, "passed": passed, "c": created, "source": source,
         "score": score if score is not None else (0.1 if passed else 0.9),
         "seg": json.dumps(segment or {})})
