"""Which (trace, metric) pairs of a list of keys still need a score, on
judgeflow's own database: every question is asked of keys read from the
source (judgeflow/sources/trace_source.py), each pair looked up by the primary
keys of ``eval_results`` and ``claims``, so the source and the results may
live in different databases and nothing is ever scanned."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Iterator, Sequence

from sqlalchemy import Connection, Engine, text

from judgeflow.db.judge_batches import DEAD, held_by_batch_sql
from judgeflow.db.pending import held
from judgeflow.db.schema import DONE_STATUSES
from judgeflow.sources.table import SAMPLE_SQL
from judgeflow.sources.trace_source import KeyFilter, TraceKey, TraceSource


@dataclass(frozen=True)
class Done:
    """When a pair counts as done (the rest is pending).

    ``run_started``: a result written since then counts as done, whatever its
    status (a run tries a pair once: a later copy of a duplicate id does not
    get a second go). ``max_failed_runs``: a pair that failed in that many
    runs is given up (counts as done); None retries every failed pair.
    ``rescore_before``: results written before it count as not done."""

    run_started: datetime | None = None
    max_failed_runs: int | None = None
    rescore_before: datetime | None = None
    # a nightly run: traces a sample budget did not select count as done (judgeflow/sampling/)
    not_sampled_done: bool = False
    # a run that does not send batches: a pair whose line is in a live batch (younger than this
    # window, judgeflow/db/judge_batches.py) is left to the batch run that collects it; None: claimed
    batch_window_s: float | None = None
    # a run under a sample budget, in the phases before its last: traces a sample decided for a night
    # before this one wait for that phase, after tonight's own work (tasks/claims.py)
    decided_before_night: date | None = None

    def sql(self, r: str = "r") -> tuple[str, dict[str, Any]]:
        """A condition on the eval_results row ``r``."""
        params: dict[str, Any] = {"done": list(DONE_STATUSES)}
        cond = f"{r}.status = ANY(:done)"
        if self.max_failed_runs is not None:
            cond = f"({cond} OR ({r}.status = 'failed' AND {r}.failed_runs >= :max_failed_runs))"
            params["max_failed_runs"] = self.max_failed_runs
        if self.run_started is not None:
            cond = f"({cond} OR {r}.scored_at >= :run_started)"
            params["run_started"] = self.run_started
        if self.rescore_before is not None:
            cond = f"({cond} AND {r}.scored_at >= :rescore_before)"
            params["rescore_before"] = self.rescore_before
        return cond, params


def _key_params(keys: Sequence[TraceKey]) -> dict[str, Any]:
    return {"k_ids": [k.id for k in keys]}


# the keys in their order (ord), each id once: its first (oldest) occurrence
_KEYS = """
    keys AS MATERIALIZED (
        SELECT DISTINCT ON (k.id) k.id, k.ord
        FROM unnest(CAST(:k_ids AS text[])) WITH ORDINALITY AS k(id, ord)
        ORDER BY k.id, k.ord
    )"""


def _pending_pairs(done: Done, *, exclude_held: bool = True) -> tuple[str, dict[str, Any]]:
    cond, params = done.sql()
    sql = f"""
        SELECT k.id AS trace_id, k.ord, m.metric
        FROM keys k CROSS JOIN unnest(CAST(:metrics AS text[])) AS m(metric)
        -- a correlated scalar subquery, never a join: one probe of eval_results'
        -- primary key per pair, whatever the planner thinks of a hash join over
        -- the whole table
        WHERE NOT COALESCE((SELECT {cond} FROM judgeflow.eval_results r
                            WHERE r.trace_id = k.id AND r.metric = m.metric), false)"""
    if done.not_sampled_done:
        sql += """
          AND NOT EXISTS (SELECT 1 FROM judgeflow.sample_decisions d WHERE d.trace_id = k.id AND NOT d.selected)"""
    if done.decided_before_night is not None:
        sql += """
          AND NOT EXISTS (SELECT 1 FROM judgeflow.sample_decisions d WHERE d.trace_id = k.id AND d.night < :night)"""
        params["night"] = done.decided_before_night
    if exclude_held:
        sql += f"""
          AND NOT EXISTS (SELECT 1 FROM judgeflow.claims c
                          WHERE c.trace_id = k.id AND c.metric = m.metric AND {held("c")})"""
    if exclude_held and done.batch_window_s is not None:
        sql += f"""
          AND NOT {held_by_batch_sql("k.id", "m.metric")}"""
        params.update(dead=list(DEAD), window_s=done.batch_window_s)
    return sql, params


def claim_keys(
    conn: Connection, keys: Sequence[TraceKey], metrics: list[str], *, n_keys: int, done: Done, owner: str,
    owner_key: int | None, lease_s: float,
) -> tuple[list[tuple[int, str, bool]], bool]:
    """Claim the pending pairs of the first ``n_keys`` keys (in order) that
    have any: [(index in keys, metric, mine)], and whether every key of
    ``keys`` was looked at (False: the claim stopped at ``n_keys``). One
    statement: run it in autocommit (a claim is never held open by a frozen
    process between a statement and its COMMIT)."""
    if not keys:
        return [], True
    pending, params = _pending_pairs(done)
    params.update(_key_params(keys), metrics=list(metrics), n=n_keys, owner=owner, lease=lease_s,
                  owner_key=owner_key)
    rows = conn.execute(
        text(
            f"""
            WITH {_KEYS},
            candidates AS MATERIALIZED ({pending}),
            chosen AS MATERIALIZED (
                SELECT * FROM candidates
                WHERE ord IN (SELECT DISTINCT ord FROM candidates ORDER BY ord LIMIT :n)
            ),
            claimed AS (
                INSERT INTO judgeflow.claims (trace_id, metric, owner, claimed_at, lease_expires_at, owner_key)
                SELECT trace_id, metric, :owner, now(), now() + make_interval(secs => :lease),
                       CAST(:owner_key AS bigint)
                FROM chosen
                ON CONFLICT (trace_id, metric) DO UPDATE
                    SET owner = excluded.owner, claimed_at = excluded.claimed_at,
                        lease_expires_at = excluded.lease_expires_at, owner_key = excluded.owner_key
                    -- taken over when its lease ran out or its owner is gone
                    WHERE NOT {held("judgeflow.claims")}
                RETURNING trace_id, metric
            )
            SELECT ch.ord, ch.metric, (cl.trace_id IS NOT NULL) AS mine,
                   (SELECT count(DISTINCT ord) FROM candidates) AS keys_with_work
            FROM chosen ch LEFT JOIN claimed cl ON cl.trace_id = ch.trace_id AND cl.metric = ch.metric
            ORDER BY ch.ord, ch.metric
            """
        ),
        params,
    ).all()
    whole = not rows or rows[0][3] <= n_keys
    return [(int(ord_) - 1, metric, bool(mine)) for ord_, metric, mine, _ in rows], whole


def count_pending_keys(
    conn: Connection, keys: Sequence[TraceKey], metrics: list[str], *, done: Done, exclude_held: bool = True
) -> dict[str, int]:
    """Pending pairs per metric among ``keys`` (an id listed twice counts once)."""
    counts = {m: 0 for m in metrics}
    if not keys:
        return counts
    pending, params = _pending_pairs(done, exclude_held=exclude_held)
    params.update(_key_params(keys), metrics=list(metrics))
    for metric, n in conn.execute(
        text(f"WITH {_KEYS} SELECT metric, count(*) FROM ({pending}) p GROUP BY metric"), params
    ).all():
        counts[metric] = n
    return counts


def first_without_result(conn: Connection, keys: Sequence[TraceKey], metrics: list[str]) -> dict[str, int]:
    """Per metric, the index in ``keys`` of the first key with no result row at
    all (whatever its status); a metric whose keys all have one is absent."""
    if not keys:
        return {}
    rows = conn.execute(
        text(
            f"""
            WITH {_KEYS}
            SELECT m.metric, min(k.ord)
            FROM keys k CROSS JOIN unnest(CAST(:metrics AS text[])) AS m(metric)
            -- one probe of eval_results' primary key per pair (a scalar subquery, never a join)
            WHERE (SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = k.id AND r.metric = m.metric) IS NULL
              -- a trace the sample budget did not select is decided for the night
              AND NOT EXISTS (SELECT 1 FROM judgeflow.sample_decisions d WHERE d.trace_id = k.id AND NOT d.selected)
            GROUP BY m.metric
            """
        ),
        {**_key_params(keys), "metrics": list(metrics)},
    ).all()
    return {metric: int(ord_) - 1 for metric, ord_ in rows}


def failed_keys(
    conn: Connection, metrics: list[str], *, before: datetime, done: Done, sample_rate: float = 1.0,
    after: tuple[datetime, str] | None = None, limit: int,
) -> list[TraceKey]:
    """Keys of pairs that failed and are retried, with a trace time before
    ``before`` (older than a run's window), oldest first: from eval_results'
    index on failed rows, never from the source."""
    cond, params = done.sql()
    params.update(metrics=list(metrics), before=before, limit=limit)
    where = ["r.status = 'failed'", "r.metric = ANY(CAST(:metrics AS text[]))", "r.trace_created_at < :before",
             f"NOT ({cond})"]
    if sample_rate < 1.0:
        where.append(SAMPLE_SQL.format(id="r.trace_id"))
        params["rate"] = sample_rate
    if after is not None:
        where.append("r.trace_created_at >= :a_at AND (r.trace_created_at, r.trace_id) > (:a_at, :a_id)")
        params.update(a_at=after[0], a_id=after[1])
    rows = conn.execute(
        text(
            f"SELECT DISTINCT r.trace_id, r.trace_created_at FROM judgeflow.eval_results r WHERE {' AND '.join(where)} "
            "ORDER BY r.trace_created_at, r.trace_id LIMIT :limit"
        ),
        params,
    ).all()
    return [TraceKey(t, at) for t, at in rows]


def key_pages(source: TraceSource, engine: Engine, f: KeyFilter, *, page: int) -> Iterator[list[TraceKey]]:
    """The source's keys matching ``f``, oldest first, ``page`` at a time."""
    after = f.after
    while True:
        sql, params = source.keys_sql(KeyFilter(**{**f.__dict__, "after": after}))
        with engine.connect() as conn:
            keys = [TraceKey(i, at) for i, at in conn.execute(text(sql), {**params, "limit": page}).all()]
        if keys:
            yield keys
        if len(keys) < page:
            return
        after = (keys[-1].created_at, keys[-1].id)
