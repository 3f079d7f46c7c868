"""``judgeflow.sample_decisions``: one row per trace a sample budget decided
on, with its night, stratum, inclusion probability and whether it is judged.

- A selected trace's results weigh ``1 / inclusion_prob`` in every rate
  (judgeflow/alerts/estimates.py).
- A trace not selected is neither pending nor failed for nightly runs
  (judgeflow/db/pairs.py) and does not hold the watermark back; `judgeflow
  status` counts it; a backfill can still judge it, and :func:`reweigh` then
  counts it as selected and lowers its stratum's weights to match.
- Traces never planned have no row and weigh 1.
"""

from __future__ import annotations

from datetime import date
from typing import Sequence

from sqlalchemy import Connection, text

from judgeflow.sources.types import TraceKey

# SQL: the weight of an eval_results row (joined as ``d``)
WEIGHT_SQL = "COALESCE(1.0 / d.inclusion_prob, 1.0)"
# the join that brings it; eval_results must be unaliased (its columns are unqualified in the rates' SQL)
WEIGHT_JOIN = " LEFT JOIN judgeflow.sample_decisions d ON d.trace_id = judgeflow.eval_results.trace_id"


def record(conn: Connection, night: date, stratum: str, keys: Sequence[TraceKey], selected: set[str], *,
           inclusion_prob: float, cost_per_trace: float, flow_run_id: str | None) -> int:
    """Insert the decisions of one stratum; a trace already decided keeps its
    first decision. Returns the rows written."""
    if not keys:
        return 0
    result = conn.execute(
        text(
            """
            INSERT INTO judgeflow.sample_decisions
                (trace_id, night, stratum, inclusion_prob, selected, est_cost_usd, created_at, planned_by)
            SELECT k.id, :night, :stratum, :p, k.id = ANY(CAST(:selected AS text[])), :cost, k.at, :run
            FROM unnest(CAST(:ids AS text[]), CAST(:ats AS timestamptz[])) AS k(id, at)
            ON CONFLICT (trace_id) DO NOTHING
            """
        ),
        {"night": night, "stratum": stratum, "p": inclusion_prob, "selected": sorted(selected),
         "cost": cost_per_trace, "run": flow_run_id, "ids": [k.id for k in keys],
         "ats": [k.created_at for k in keys]},
    )
    return result.rowcount or 0


def committed_usd(conn: Connection, night: date) -> float:
    """What the night's earlier plans committed: the estimated cost of the traces they selected."""
    return float(conn.execute(
        text("SELECT coalesce(sum(est_cost_usd), 0) FROM judgeflow.sample_decisions WHERE night = :n AND selected"),
        {"n": night},
    ).scalar_one())


def reweigh(conn: Connection) -> int:
    """Traces not selected that have since been judged (by a backfill) count as
    selected, and their (night, stratum)'s inclusion probability becomes
    selected / traffic again. Returns the traces moved."""
    moved = conn.execute(
        text(
            """
            UPDATE judgeflow.sample_decisions d SET selected = true
            WHERE NOT d.selected
              AND EXISTS (SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = d.trace_id AND r.status = 'scored')
            RETURNING night, stratum
            """
        )
    ).all()
    for night, stratum in set(moved):
        conn.execute(
            text(
                """
                UPDATE judgeflow.sample_decisions d SET inclusion_prob = s.p
                FROM (SELECT (count(*) FILTER (WHERE selected))::float / count(*) AS p
                      FROM judgeflow.sample_decisions WHERE night = :n AND stratum = :s) s
                WHERE d.night = :n AND d.stratum = :s
                """
            ),
            {"n": night, "s": stratum},
        )
    return len(moved)


def not_sampled_waiting(conn: Connection) -> int:
    """Traces not selected and still without a result: what `judgeflow status` reports."""
    return int(conn.execute(
        text(
            "SELECT count(*) FROM judgeflow.sample_decisions d WHERE NOT d.selected "
            "AND NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = d.trace_id)"
        )
    ).scalar_one())


def any_in_range(conn: Connection, since) -> bool:
    """Whether any trace created since ``since`` was sampled: rates over such a
    period are weighted (otherwise every weight is 1 and no join is needed)."""
    return bool(conn.execute(
        text("SELECT EXISTS (SELECT 1 FROM judgeflow.sample_decisions WHERE created_at >= :s)"), {"s": since}
    ).scalar_one())
