"""What `judgeflow status` and `db check` read from judgeflow's tables besides the
result counts (judgeflow/db/result_counts.py): claims not yet done, superseded
results, the skips a source preset decided, and the traces runs could not read."""

from __future__ import annotations

from sqlalchemy import Connection, text

from judgeflow.db.pairs import Done
from judgeflow.db.pending import held

_PRESET_SKIPS = text(
    "SELECT metric, reason, count(*) FROM judgeflow.eval_results "
    "WHERE source = :source AND status = 'skipped' AND (details ->> 'skipped_by_source') = 'true' "
    "GROUP BY 1, 2 ORDER BY 3 DESC, 2"
)


def open_claims(conn: Connection, done: Done) -> list[tuple]:
    """(metric, owner, held, pairs, latest lease end) of the claims on pairs
    without a ``done`` result, by metric, owner and whether the claim is held."""
    cond, params = done.sql()
    return conn.execute(
        text(
            f"""
            SELECT c.metric, c.owner, {held("c")} AS held, count(*), max(c.lease_expires_at)
            FROM judgeflow.claims c
            WHERE NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r
                              WHERE r.trace_id = c.trace_id AND r.metric = c.metric AND {cond})
            GROUP BY 1, 2, 3
            """
        ),
        params,
    ).all()


def superseded_counts(conn: Connection) -> dict[str, int]:
    """Per metric, the late results of runs that had lost the pair."""
    return dict(conn.execute(text("SELECT metric, count(*) FROM judgeflow.superseded_results GROUP BY metric")).all())


def preset_skips(conn: Connection, source: str) -> dict[str, dict[str, int]]:
    """Per metric, the skipped results the source preset decided (no judge asked), by reason."""
    out: dict[str, dict[str, int]] = {}
    for metric, reason, n in conn.execute(_PRESET_SKIPS, {"source": source}).all():
        out.setdefault(metric, {})[reason or "no reason given"] = int(n)
    return out


def unreadable_traces(conn: Connection, mark: str) -> dict[str, str]:
    """Trace id -> the database's error, of the traces whose latest failed result
    (``invalid_trace``) says, after ``mark``, why the source could not read it."""
    recorded = conn.execute(text(
        "SELECT DISTINCT ON (trace_id) trace_id, error FROM judgeflow.eval_results "
        "WHERE status = 'failed' AND error_kind = 'invalid_trace' AND error LIKE :mark "
        "ORDER BY trace_id, scored_at DESC"
    ), {"mark": f"%{mark}%"}).all()
    return {t: e.split(mark + ": ", 1)[-1] for t, e in recorded}
