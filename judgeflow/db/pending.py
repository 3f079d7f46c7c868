"""Which (trace, metric) pairs still need a score: one definition, used by
claiming, counting, progress and backfill estimates."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from judgeflow.db.schema import DONE_STATUSES
from judgeflow.sources.table import SourceTable

# Each scoring run holds pg_advisory_lock(RUN_LOCK_NAMESPACE, owner_key) on a
# connection of its own for as long as it lives, and stamps its claims with
# owner_key. PostgreSQL drops a session's locks when its connection ends, so a
# killed run's claims are free as soon as its connection is gone, without
# waiting for the lease. (An int4, so 'jflw' as a number.)
RUN_LOCK_NAMESPACE = 0x6A666C77

# The owner keys whose run lock is held right now in this database. pg_locks
# shows a two-int advisory lock as classid = first key, objid = second key,
# objsubid = 2. Uncorrelated, so PostgreSQL evaluates it once per statement.
LIVE_OWNER_KEYS = (
    "SELECT l.objid::bigint FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted "
    f"AND l.objsubid = 2 AND l.classid = {RUN_LOCK_NAMESPACE}::oid "
    "AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())"
)


def held(claim: str = "c") -> str:
    """SQL: the claim row ``claim`` is held, i.e. its lease runs and its owner
    still holds its run lock. The lease is the fallback for an owner that holds
    its lock but stopped renewing (frozen, or cut off from the database without
    the server noticing yet); a claim without an owner key has only its lease."""
    return (
        f"({claim}.lease_expires_at > now() AND ({claim}.owner_key IS NULL "
        f"OR {claim}.owner_key IN ({LIVE_OWNER_KEYS})))"
    )


def _not_done(rescore_before: datetime | None, run_started: datetime | None, max_failed_runs: int | None
              ) -> tuple[str, dict[str, Any]]:
    """SQL: the pair ``(t, m)`` has no result that counts as done (see :func:`pending_where`)."""
    params: dict[str, Any] = {"done": list(DONE_STATUSES)}
    status_done = "r.status = ANY(:done)"
    if max_failed_runs is not None:
        status_done = f"({status_done} OR (r.status = 'failed' AND r.failed_runs >= :max_failed_runs))"
        params["max_failed_runs"] = max_failed_runs
    if run_started is not None:
        status_done = f"({status_done} OR r.scored_at >= :run_started)"
        params["run_started"] = run_started
    done = (
        "NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = t.id::text "
        f"AND r.metric = m.metric AND {status_done}"
    )
    if rescore_before is not None:
        # re-scoring: results written before this run count as not done
        done += " AND r.scored_at >= :rescore_before"
        params["rescore_before"] = rescore_before
    return done + ")", params


def pending_where(
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    sample_rate: float = 1.0,
    rescore_before: datetime | None = None,
    after: tuple[datetime, str, str] | None = None,
    settle_delay_s: float = 0.0,
    exclude_held: bool = True,
    run_started: datetime | None = None,
    max_failed_runs: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """WHERE clause over ``source t CROSS JOIN unnest(:metrics) m(metric)``:
    pairs without a done result and (unless ``exclude_held`` is False) not
    held by a live run's claim.

    ``run_started``: a result written since then counts as done, whatever its
    status (a run tries a pair once: a later copy of a duplicate id does not
    get a second go). ``max_failed_runs``: a pair that failed in that many runs
    is given up (counts as done); None retries every failed pair."""
    done, params = _not_done(rescore_before, run_started, max_failed_runs)
    clauses = [
        # rows judgeflow cannot key or order are never candidates (they would
        # break claiming and keyset paging); runs and `db check` report them
        "t.id IS NOT NULL",
        "t.created_at IS NOT NULL",
        done,
    ]
    if exclude_held:
        clauses.append(
            "NOT EXISTS (SELECT 1 FROM judgeflow.claims c WHERE c.trace_id = t.id::text "
            f"AND c.metric = m.metric AND {held('c')})"
        )
    if since is not None:
        clauses.append("t.created_at >= :since")
        params["since"] = since
    if until is not None:
        clauses.append("t.created_at < :until")
        params["until"] = until
    if settle_delay_s > 0:
        # a trace younger than the delay may still be being written (streamed
        # output, context attached later); the database's clock decides, so
        # the scoring machine's clock cannot skew it. A trace without a
        # timestamp cannot be shown to be young and is not held back forever.
        clauses.append("(t.created_at IS NULL OR t.created_at < now() - make_interval(secs => :settle_s))")
        params["settle_s"] = float(settle_delay_s)
    if sample_rate < 1.0:
        # deterministic per trace id: the same traces are in the sample every run
        clauses.append("(('x' || substr(md5(t.id::text), 1, 8))::bit(32)::bigint / 4294967296.0) < :rate")
        params["rate"] = sample_rate
    if after is not None:
        clauses.append("(t.created_at, t.id::text, m.metric) > (:c_at, :c_id, :c_metric)")
        params.update(c_at=after[0], c_id=after[1], c_metric=after[2])
    return " AND ".join(clauses), params


def count_pending(
    conn: Connection, source: SourceTable, metrics: list[str], *, limit_pairs: int | None = None, **filters
) -> dict[str, int]:
    """Pending pairs per metric (an id the source holds twice counts once)."""
    where, params = pending_where(**filters)
    params["metrics"] = list(metrics)
    inner = (
        f"SELECT t.id::text AS id, m.metric FROM {source.sql} t "
        f"CROSS JOIN unnest(CAST(:metrics AS text[])) AS m(metric) WHERE {where}"
    )
    if limit_pairs is not None:
        inner += " ORDER BY t.created_at LIMIT :n"
        params["n"] = limit_pairs
    rows = conn.execute(text(f"SELECT metric, count(DISTINCT id) FROM ({inner}) q GROUP BY metric"), params).all()
    counts = {m: 0 for m in metrics}
    counts.update({metric: n for metric, n in rows})
    return counts
