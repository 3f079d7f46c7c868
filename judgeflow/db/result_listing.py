"""Results as a list, newest first: ``judgeflow results``.

Newest means the trace's ``trace_created_at``, the time every window of the
alerts and the report reads. Each metric is read through an index on
``(metric, trace_created_at)`` walked backwards and cut at the limit, so a
table of millions of rows costs the rows shown, not the table: the covering
``eval_results_metric_created_idx`` for every result, and the partial indexes
of migration ``20_result_listing.py`` for ``--failed`` (scored, not passing)
and ``--errors`` (the judge could not score it: status 'failed'), which stay
fast however rare those rows are. Without ``--metric`` every metric the table
holds is listed, found by a skip scan of the same index. Read-only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.dialects.postgresql import JSONB

COLUMNS = ("trace_id", "metric", "status", "score", "passed", "threshold", "reason", "error", "error_kind",
           "judge_model", "metric_version", "trace_created_at", "scored_at", "segment", "source")

# which rows each kind is; the partial indexes of 20_result_listing.py repeat these conditions
KINDS = {
    "all": "TRUE",
    "failed": "status = 'scored' AND passed IS FALSE",
    "errors": "status = 'failed'",
}

# every metric the table holds, one index probe each (a loose index scan)
_METRICS = text(
    "WITH RECURSIVE m AS ("
    " (SELECT metric FROM judgeflow.eval_results ORDER BY metric LIMIT 1)"
    " UNION ALL"
    " SELECT (SELECT r.metric FROM judgeflow.eval_results r WHERE r.metric > m.metric ORDER BY r.metric LIMIT 1)"
    " FROM m WHERE m.metric IS NOT NULL"
    ") SELECT metric FROM m WHERE metric IS NOT NULL"
)


@dataclass(frozen=True)
class ResultFilter:
    metrics: tuple[str, ...] | None = None  # None: every metric the table holds
    kind: str = "all"  # a key of KINDS
    since: datetime | None = None  # trace_created_at >= since
    until: datetime | None = None  # trace_created_at < until
    segment: dict[str, str] | None = None  # every key=value of it in the result's segment
    source: str | None = None  # a result source (`judgeflow status` names them) or its kind, e.g. phoenix
    limit: int = 50


def stored_metrics(conn: Connection) -> list[str]:
    return list(conn.execute(_METRICS).scalars())


def _one_metric(i: int, where: str) -> str:
    return (f"(SELECT {', '.join(COLUMNS)} FROM judgeflow.eval_results "
            f"WHERE metric = :m{i} AND {where} ORDER BY trace_created_at DESC LIMIT :limit)")


def _like_literal(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def listing_sql(f: ResultFilter, metrics: list[str]):
    """One index scan per metric, each cut at the limit, merged newest first."""
    where = [KINDS[f.kind]]
    params: dict[str, Any] = {"limit": f.limit}
    if f.since is not None:
        where.append("trace_created_at >= :since")
        params["since"] = f.since
    if f.until is not None:
        where.append("trace_created_at < :until")
        params["until"] = f.until
    if f.segment:
        where.append("segment @> :segment")
        params["segment"] = f.segment
    if f.source is not None:
        where.append("(source = :source OR source LIKE :source_kind)")
        params["source"] = f.source
        params["source_kind"] = _like_literal(f.source) + ":%"
    condition = " AND ".join(where)
    parts = []
    for i, metric in enumerate(metrics):
        parts.append(_one_metric(i, condition))
        params[f"m{i}"] = metric
    sql = text(f"SELECT * FROM ({' UNION ALL '.join(parts)}) AS listed "
               "ORDER BY trace_created_at DESC, metric, trace_id LIMIT :limit")
    if f.segment:
        sql = sql.bindparams(bindparam("segment", type_=JSONB))
    return sql, params


def list_results(conn: Connection, f: ResultFilter) -> list[dict[str, Any]]:
    """The results ``f`` selects, newest first, at most ``f.limit``."""
    metrics = list(f.metrics) if f.metrics is not None else stored_metrics(conn)
    if not metrics or f.limit <= 0:
        return []
    sql, params = listing_sql(f, metrics)
    return [dict(row) for row in conn.execute(sql, params).mappings()]
