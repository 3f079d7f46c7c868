"""Counts of judgeflow.eval_results by metric, status, passed and failed
runs, per source, kept by statement triggers (migrations 10_watermarks.py, 11_result_sources.py) as rows of deltas, so
`judgeflow status` never scans the results and concurrent writers never
wait on one counter row."""

from __future__ import annotations

from sqlalchemy import Connection, text

COUNTS = text(
    "SELECT metric, status, sum(n), sum(n) FILTER (WHERE passed), "
    "sum(n) FILTER (WHERE status = 'failed' AND failed_runs >= :n) "
    "FROM judgeflow.result_counts WHERE (source = :source OR source IS NULL) GROUP BY metric, status HAVING sum(n) <> 0"
)


def result_counts(conn: Connection, *, given_up_after: int, source: str) -> list[tuple[str, str, int, int, int]]:
    """(metric, status, results, passed, failed in at least ``given_up_after`` runs)
    of the results read from ``source`` (judgeflow/sources/identity.py)."""
    return [(m, s, int(n), int(p or 0), int(g or 0))
            for m, s, n, p, g in conn.execute(COUNTS, {"n": given_up_after, "source": source}).all()]


def compact_result_counts(conn: Connection) -> None:
    """Fold the deltas into one row per group. Safe beside writers and another
    compaction: a statement deletes and re-adds only the rows it saw."""
    conn.execute(text(
        """
        WITH gone AS (DELETE FROM judgeflow.result_counts RETURNING *)
        INSERT INTO judgeflow.result_counts (source, metric, status, passed, failed_runs, n)
        SELECT source, metric, status, passed, failed_runs, sum(n) FROM gone GROUP BY 1, 2, 3, 4, 5
        HAVING sum(n) <> 0
        """
    ))
