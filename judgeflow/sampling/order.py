"""The order a sampled night's selected traces are judged in, and so what a stop leaves.

A run under a sample budget claims its own night's selected traces first and
only then the ones earlier nights selected and left unjudged (each night funds
its own plan first; the leftovers get what tonight's plan leaves over). Within
a night the traces go in the order of their *rank*: the trace's selection key
read as a number in [0, 1) (judgeflow/sampling/selection.py) over its
stratum's inclusion probability. A stratum's selected traces are those whose
key is below (about) its probability, so their ranks are uniform on [0, 1) in
every stratum whatever its probability: judging by rank and stopping anywhere
(the budget, the time budget, a stop) judges in every stratum the same share
of its selected traces, and which ones is a simple random subsample of them,
never the end of the night. :func:`judgeflow.sampling.decisions.settle` then
weighs each stratum's judged traces for all of its traces, which is unbiased
because the subsample is random (Cochran, 5A; Särndal, Swensson and Wretman,
9.3: a second phase by simple random sampling within strata). Each stratum's
first ``JUDGEFLOW_ALERT_MIN_SAMPLES`` by rank go before the rest of the night,
so a stop takes from the strata above their minimum first; the order within a
stratum is still its rank, so what a stop leaves of it is still random.
"""

from __future__ import annotations

from datetime import date

from sqlalchemy import Connection, text

from judgeflow.sampling.selection import unit
from judgeflow.sources.types import TraceKey


def rank(trace_id: str, night: date, inclusion_prob: float) -> float:
    """Where a selected trace comes in its night's order (the module doc)."""
    return unit(trace_id, night) / max(inclusion_prob, 1e-9)


def ranked(rows, min_first: int = 0) -> list[TraceKey]:
    """``rows`` of (trace id, created at, night, inclusion probability,
    stratum) as keys: night by night, oldest night first, each in rank order,
    save that every stratum's first ``min_first`` traces by rank (what its
    rules need to decide at all, ``JUDGEFLOW_ALERT_MIN_SAMPLES``) come before
    the rest of the night. Within a stratum the order is its rank order either way."""
    first: set[str] = set()
    if min_first > 0:
        strata: dict[tuple, list] = {}
        for r in rows:
            strata.setdefault((r[2], r[4]), []).append(r)
        for members in strata.values():
            members.sort(key=lambda r: (rank(r[0], r[2], float(r[3])), r[0]))
            first.update(r[0] for r in members[:min_first])
    ordered = sorted(rows, key=lambda r: (r[2], r[0] not in first, rank(r[0], r[2], float(r[3])), r[0]))
    return [TraceKey(r[0], r[1]) for r in ordered]


def selected_waiting(conn: Connection, night: date, *, earlier: bool, min_first: int = 0) -> list[TraceKey]:
    """The selected traces of the sample phase with no scored result yet, in
    judging order (:func:`ranked`, over every selected trace of their night,
    so a stratum's first ``min_first`` stay the same as traces are judged):
    those of ``night`` itself, or (``earlier``) those of the nights before it
    that still have some waiting."""
    rows = conn.execute(
        text(
            f"""
            WITH selected AS (
                SELECT d.trace_id, d.created_at, d.night, d.inclusion_prob, d.stratum,
                       NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r
                                   WHERE r.trace_id = d.trace_id AND r.status = 'scored') AS waiting
                FROM judgeflow.sample_decisions d
                WHERE d.night {'<' if earlier else '='} :n AND d.selected AND d.phase = 'sample'
            )
            SELECT trace_id, created_at, night, inclusion_prob, stratum, waiting FROM selected
            WHERE night IN (SELECT night FROM selected WHERE waiting)
            """
        ),
        {"n": night},
    ).all()
    waiting = {r[0] for r in rows if r[5]}
    return [k for k in ranked([r[:5] for r in rows], min_first) if k.id in waiting]


def nights_judged_by(conn: Connection, flow_run_ids: list[str]) -> list[date]:
    """The nights whose sampled traces runs wrote results for: each is settled with its own weights."""
    rows = conn.execute(
        text(
            """
            SELECT DISTINCT d.night FROM judgeflow.sample_decisions d
            JOIN judgeflow.eval_results r ON r.trace_id = d.trace_id WHERE r.flow_run_id = ANY(:runs)
            """
        ),
        {"runs": list(flow_run_ids)},
    ).all()
    return sorted(n for (n,) in rows)
