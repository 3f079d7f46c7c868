"""Read-only figures for people: results per metric, pending work, and the
estimated cost of a backfill from what past scores actually cost."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from judgeflow.db import migrate
from judgeflow.db.engine import engine_for
from judgeflow.db.pending import count_pending
from judgeflow.db.source import SourceTable
from judgeflow.errors import DatabaseError
from judgeflow.settings import Settings
from judgeflow.tasks.work import METRIC_NAMES


def result_counts(settings: Settings) -> dict[str, dict[str, int]]:
    engine = engine_for(settings)
    migrate.upgrade(engine)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT metric, status, count(*), count(*) FILTER (WHERE passed) "
                    "FROM judgeflow.eval_results GROUP BY metric, status"
                )
            ).all()
            pending = count_pending(conn, SourceTable.parse(settings.traces_table), list(METRIC_NAMES))
    except DBAPIError as exc:
        raise DatabaseError(f"could not read results: {exc.orig}") from None
    out = {m: {"scored": 0, "passed": 0, "skipped": 0, "failed": 0, "pending": pending[m]} for m in METRIC_NAMES}
    for metric, status, n, passed in rows:
        out[metric][status] = n
        if status == "scored":
            out[metric]["passed"] = passed
    return out


@dataclass
class BackfillEstimate:
    pairs: int
    traces: int
    per_metric: dict[str, int]
    cost_usd: float | None
    basis: str

    def describe(self) -> str:
        cost = "unknown" if self.cost_usd is None else f"${self.cost_usd:,.4f}"
        per = ", ".join(f"{m}: {n}" for m, n in self.per_metric.items())
        return f"{self.traces} traces to score ({per}); estimated cost {cost} ({self.basis})"


def estimate_backfill(settings: Settings, *, since: datetime, until: datetime, rescore: bool) -> BackfillEstimate:
    engine = engine_for(settings)
    migrate.upgrade(engine)
    source = SourceTable.parse(settings.traces_table)
    try:
        with engine.connect() as conn:
            per_metric = count_pending(
                conn, source, list(METRIC_NAMES), since=since, until=until,
                rescore_before=datetime.max.replace(tzinfo=since.tzinfo) if rescore else None,
            )
            traces = conn.execute(
                text(f"SELECT count(*) FROM {source.sql} t WHERE t.created_at >= :s AND t.created_at < :u"),
                {"s": since, "u": until},
            ).scalar_one()
            averages = dict(
                conn.execute(
                    text(
                        "SELECT metric, avg(cost_usd) FROM judgeflow.eval_results "
                        "WHERE status = 'scored' AND cost_usd IS NOT NULL AND judge_model = :model "
                        "GROUP BY metric"
                    ),
                    {"model": settings.judge_model},
                ).all()
            )
    except DBAPIError as exc:
        raise DatabaseError(f"could not estimate the backfill: {exc.orig}") from None
    pairs = sum(per_metric.values())
    if all(per_metric[m] == 0 or m in averages for m in METRIC_NAMES):
        cost = sum(per_metric[m] * float(averages.get(m) or 0.0) for m in METRIC_NAMES)
        basis = f"average past cost per score with {settings.judge_model}"
    else:
        cost, basis = None, f"no past scores with a known price for {settings.judge_model}"
    scored_traces = traces if rescore else min(traces, max(per_metric.values(), default=0))
    return BackfillEstimate(pairs=pairs, traces=scored_traces, per_metric=per_metric, cost_usd=cost, basis=basis)
