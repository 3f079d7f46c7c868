"""Conversations in judgeflow's database (24_sessions.py, 25_session_scores.py; docs/metrics.md,
"Conversations").

A run records the turns of the traces new since the source's last scan (``session_scans``): each
turn once (``session_turns``' primary key), each session's turn count and last turn time grown by the
turns it really inserted, so two runs recording the same traces count them once. A session is due
while the turns its latest judging saw differ from the turns it has (``sessions_due_idx``, a
partial index: the search reads the sessions that changed, never the history) and quiet once its
last turn is older than ``JUDGEFLOW_SESSION_IDLE`` by the database's clock. A (session, metric)
pair is done when its result row saw the session's current turns; a session is marked judged once
every session metric's pair is done, and only if it did not grow meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import Connection, Engine, text

from judgeflow.db.pending import held
from judgeflow.db.schema import DONE_STATUSES
from judgeflow.sources.session_id import session_result_id
from judgeflow.sources.trace_source import read_bodies
from judgeflow.sources.types import TraceKey, TraceSource


@dataclass(frozen=True)
class QuietSession:
    """A session that went quiet with turns no judging saw (:func:`quiet_sessions`)."""

    session_id: str
    turns: int
    last_turn_at: datetime


_RECORD = text(
    """
    WITH rows AS (
        SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:sessions AS text[]), CAST(:keys AS text[]),
                             CAST(:ats AS timestamptz[])) AS x(trace_id, session_id, session_key, created_at)
    ),
    inserted AS (
        INSERT INTO judgeflow.session_turns (source, trace_id, session_id, created_at)
        SELECT DISTINCT ON (trace_id) :source, trace_id, session_id, created_at FROM rows ORDER BY trace_id
        ON CONFLICT (source, trace_id) DO NOTHING
        RETURNING session_id, created_at
    ),
    grown AS (
        SELECT i.session_id, min(i.created_at) AS first_at, max(i.created_at) AS last_at, count(*) AS n,
               (SELECT r.session_key FROM rows r WHERE r.session_id = i.session_id LIMIT 1) AS session_key
        FROM inserted i GROUP BY i.session_id
    )
    INSERT INTO judgeflow.sessions AS s (session_id, source, session_key, first_turn_at, last_turn_at, turns)
    SELECT session_id, :source, session_key, first_at, last_at, n FROM grown
    ON CONFLICT (session_id) DO UPDATE SET
        turns = s.turns + excluded.turns,
        first_turn_at = least(s.first_turn_at, excluded.first_turn_at),
        last_turn_at = greatest(s.last_turn_at, excluded.last_turn_at)
    """
)


def record_turns(conn: Connection, source: str, rows: Sequence[tuple[str, datetime, str]]) -> None:
    """Record ``(trace id, created_at, session value)`` rows of ``source`` as turns (see the module doc)."""
    if not rows:
        return
    conn.execute(_RECORD, {
        "source": source, "ids": [r[0] for r in rows], "ats": [r[1] for r in rows], "keys": [r[2] for r in rows],
        "sessions": [session_result_id(source, r[2]) for r in rows],
    })


def scanned_to(conn: Connection, source: str) -> datetime | None:
    return conn.execute(text("SELECT scanned_to FROM judgeflow.session_scans WHERE source = :source"),
                        {"source": source}).scalar()


def set_scanned_to(conn: Connection, source: str, at: datetime) -> None:
    conn.execute(text(
        """
        INSERT INTO judgeflow.session_scans AS s (source, scanned_to) VALUES (:source, :at)
        ON CONFLICT (source) DO UPDATE SET scanned_to = greatest(s.scanned_to, excluded.scanned_to), updated_at = now()
        """
    ), {"source": source, "at": at})


# a session of :source with turns no judging saw (``sessions_due_idx``: its predicate as written), and
# quiet: its last turn older than :idle seconds by the database's clock
_DUE_SESSION = "source = :source AND (judged_turns IS NULL OR judged_turns <> turns)"
_QUIET = "last_turn_at < now() - make_interval(secs => :idle)"


def quiet_sessions(conn: Connection, source: str, idle_s: float) -> list[QuietSession]:
    """The sessions of ``source`` whose turns no judging saw and whose last turn is older than
    ``idle_s`` by the database's clock, oldest first (``sessions_due_idx``: its predicate as written)."""
    rows = conn.execute(text(
        f"""
        SELECT session_id, turns, last_turn_at FROM judgeflow.sessions
        WHERE {_DUE_SESSION} AND {_QUIET}
        ORDER BY last_turn_at, session_id
        """
    ), {"source": source, "idle": float(idle_s)}).all()
    return [QuietSession(sid, turns, at) for sid, turns, at in rows]


def _pair_done(max_failed_runs: int | None) -> tuple[str, dict[str, Any]]:
    """SQL, true when the result row ``r`` of a session with ``d.turns`` turns is done: it saw them,
    and it is scored or skipped, or failed in as many runs as a pair may."""
    params: dict[str, Any] = {"done": list(DONE_STATUSES)}
    status = "r.status = ANY(:done)"
    if max_failed_runs is not None:
        status = f"({status} OR (r.status = 'failed' AND r.failed_runs >= :max_failed_runs))"
        params["max_failed_runs"] = max_failed_runs
    return f"(r.details -> 'turns') = to_jsonb(d.turns) AND {status}", params


_DUE = """
    due AS MATERIALIZED (
        SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:turns AS int[])) WITH ORDINALITY AS d(id, turns, ord)
    )"""


def _pending(max_failed_runs: int | None) -> tuple[str, dict[str, Any]]:
    done, params = _pair_done(max_failed_runs)
    return f"""
        SELECT d.id, d.ord, m.metric FROM due d CROSS JOIN unnest(CAST(:metrics AS text[])) AS m(metric)
        -- one probe of eval_results' primary key per pair
        WHERE NOT COALESCE((SELECT {done} FROM judgeflow.eval_results r
                            WHERE r.trace_id = d.id AND r.metric = m.metric), false)""", params


def claim_session_pairs(conn: Connection, sessions: Sequence[QuietSession], metrics: list[str], *, owner: str,
                        owner_key: int | None, lease_s: float, max_failed_runs: int | None
                        ) -> list[tuple[QuietSession, str]]:
    """Claim the pending (session, metric) pairs of ``sessions`` in the claims every run shares
    (:func:`judgeflow.db.pairs.claim_keys`' rules: a held claim is another run's, a lapsed one is
    taken over). One statement: run it in autocommit."""
    if not sessions or not metrics:
        return []
    pending, params = _pending(max_failed_runs)
    rows = conn.execute(text(
        f"""
        WITH {_DUE},
        candidates AS MATERIALIZED ({pending})
        INSERT INTO judgeflow.claims (trace_id, metric, owner, claimed_at, lease_expires_at, owner_key)
        SELECT id, metric, :owner, now(), now() + make_interval(secs => :lease), CAST(:owner_key AS bigint)
        FROM candidates
        ON CONFLICT (trace_id, metric) DO UPDATE
            SET owner = excluded.owner, claimed_at = excluded.claimed_at,
                lease_expires_at = excluded.lease_expires_at, owner_key = excluded.owner_key
            WHERE NOT {held("judgeflow.claims")}
        RETURNING trace_id, metric
        """
    ), {**params, "ids": [s.session_id for s in sessions], "turns": [s.turns for s in sessions],
        "metrics": list(metrics), "owner": owner, "owner_key": owner_key, "lease": lease_s}).all()
    by_id = {s.session_id: s for s in sessions}
    order = {s.session_id: i for i, s in enumerate(sessions)}
    return sorted(((by_id[sid], metric) for sid, metric in rows), key=lambda p: (order[p[0].session_id], p[1]))


def mark_judged(conn: Connection, sessions: Sequence[QuietSession], metrics: list[str], *,
                max_failed_runs: int | None) -> list[str]:
    """Mark judged the sessions of ``sessions`` that still have the turns they were found with and
    whose every (session, metric) pair of ``metrics`` is done; the ids marked. A session that grew
    since stays due; one with a pair left (a stop, the budget) stays due and only that pair is
    judged by the next run."""
    if not sessions:
        return []
    pending, params = _pending(max_failed_runs)
    rows = conn.execute(text(
        f"""
        WITH {_DUE}
        UPDATE judgeflow.sessions s
        SET judged_turns = s.turns, judged_last_turn_at = s.last_turn_at, judged_at = now()
        FROM due d
        WHERE s.session_id = d.id AND s.turns = d.turns
          AND NOT EXISTS (SELECT 1 FROM ({pending}) p WHERE p.id = d.id)
        RETURNING s.session_id
        """
    ), {**params, "ids": [s.session_id for s in sessions], "turns": [s.turns for s in sessions],
        "metrics": list(metrics)}).all()
    return [r[0] for r in rows]


def decide_out(conn: Connection, sessions: Sequence[QuietSession]) -> list[str]:
    """Sessions a sampled night left out (judgeflow/sampling/sessions.py): not due again for the
    turns they have (``judged_turns``), without a judging (``judged_at`` stays); due again once they
    grow. A session that grew meanwhile stays due. The ids decided out."""
    if not sessions:
        return []
    rows = conn.execute(text(
        f"""
        WITH {_DUE}
        UPDATE judgeflow.sessions s SET judged_turns = s.turns, judged_last_turn_at = s.last_turn_at
        FROM due d WHERE s.session_id = d.id AND s.turns = d.turns
        RETURNING s.session_id
        """
    ), {"ids": [s.session_id for s in sessions], "turns": [s.turns for s in sessions]}).all()
    return [r[0] for r in rows]


def turn_keys(conn: Connection, session_ids: Sequence[str]) -> dict[str, list[TraceKey]]:
    """Each session's turns as source keys, in turn order (``created_at``, then id)."""
    out: dict[str, list[TraceKey]] = {sid: [] for sid in session_ids}
    rows = conn.execute(text(
        """
        SELECT session_id, trace_id, created_at FROM judgeflow.session_turns
        WHERE session_id = ANY(CAST(:ids AS text[])) ORDER BY session_id, created_at, trace_id
        """
    ), {"ids": list(session_ids)}).all()
    for sid, trace_id, at in rows:
        out[sid].append(TraceKey(trace_id, at))
    return out


def conversations(conn: Connection, source: TraceSource, source_engine: Engine,
                  session_ids: Sequence[str]) -> dict[str, list[dict]]:
    """Each session's turns, read from ``source`` by key in turn order, as the conversation a session
    metric reads (``[{"input", "output"}, ...]``): what session judging, ``labels sample`` and shadow
    scoring all show, so a labeller and a candidate judge see what the judge in force saw. A turn the
    source no longer shows or cannot read is left out."""
    keys = turn_keys(conn, session_ids)
    read = read_bodies(source, source_engine, [k for ks in keys.values() for k in ks])
    out = {}
    for sid, ks in keys.items():
        bodies = [read.bodies.get(k.id) for k in ks]
        out[sid] = [{"input": b.input, "output": b.output} for b in bodies if b is not None]
    return out


def sessions_due(conn: Connection, source: str, idle_s: float) -> bool:
    """Whether any session of ``source`` is quiet and due (`judgeflow score`'s "anything to do")."""
    return bool(conn.execute(text(
        f"SELECT EXISTS (SELECT 1 FROM judgeflow.sessions WHERE {_DUE_SESSION} AND {_QUIET})"
    ), {"source": source, "idle": float(idle_s)}).scalar())


def sessions_waiting(conn: Connection, source: str, idle_s: float) -> dict[str, int]:
    """The sessions of ``source`` with turns no judging saw: ``quiet`` (the next run judges them) and
    ``open`` (their last turn is not ``idle_s`` old yet: a later run judges them); `judgeflow status`."""
    quiet, open_ = conn.execute(text(
        f"SELECT count(*) FILTER (WHERE {_QUIET}), count(*) FILTER (WHERE NOT ({_QUIET})) "
        f"FROM judgeflow.sessions WHERE {_DUE_SESSION}"
    ), {"source": source, "idle": float(idle_s)}).one()
    return {"quiet": quiet, "open": open_}
