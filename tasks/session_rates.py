"""The ``store-session-rates`` task: each trace metric's session rate (``M_session``) of given sessions,
computed from their turns' results and stored as eval_results rows at no judge cost.

Called by the session flow for the sessions that went quiet and changed; a row that would not change is
left alone, a changed one replaces the stored row, which is kept as history
(:mod:`judgeflow.db.session_rates`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from judgeflow.config.settings import Settings
from judgeflow.db.engine import engine_for
from judgeflow.db.session_rates import SessionTurns, read_session_turns, store_session_rows
from judgeflow.metrics.registry import MetricSpec, registered, session_rate_of
from judgeflow.metrics.session_rate import TurnResult, session_rate

log = logging.getLogger("judgeflow.sessions")

# sessions read in one query: bounds one query's rows (turns x trace metrics) and its transaction
SESSIONS_PER_QUERY = 500


@dataclass(frozen=True)
class SessionRates:
    """What one call stored: rows written (new or changed), rows computed and left as they were, and
    (session, rate) pairs with no scored turn, so no row."""

    written: int = 0
    unchanged: int = 0
    no_scored_turn: int = 0
    # the sessions a rate was computed for, and per rate (rows computed, of them passed): the run's summary
    sessions: tuple[str, ...] = ()
    by_metric: dict[str, tuple[int, int]] = field(default_factory=dict)


def _trace_metrics(settings: Settings) -> dict[str, MetricSpec]:
    """The trace metrics these settings serve, each with a session rate."""
    specs = registered()
    return {name: specs[name] for name in settings.metric_specs()
            if name in specs and specs[name].level == "trace" and specs[name].rate_of is None}


def rate_rows(settings: Settings, session: SessionTurns, metrics: dict[str, MetricSpec],
              flow_run_id: str | None) -> tuple[list[dict], int]:
    """The session's rate rows, and how many of its rates have no scored turn (no row)."""
    rows, missing = [], 0
    for name, spec in metrics.items():
        rate = session_rate_of(spec)
        turns = [TurnResult(*session.results.get((trace_id, name), (None, None))) for trace_id in session.turns]
        result = session_rate(rate.name, turns, threshold=settings.metric(rate.name).threshold)
        if result is None:
            missing += 1
            continue
        rows.append({
            "trace_id": session.session_id, "metric": rate.name, "metric_version": result.metric_version,
            "score": result.score, "passed": result.passed, "threshold": result.threshold, "reason": result.reason,
            "details": result.details, "trace_created_at": session.last_turn_at.isoformat(),
            "segment": session.segment, "source": session.source, "flow_run_id": flow_run_id,
        })
    return rows, missing


def store_rates(settings: Settings, session_ids: Sequence[str], *, flow_run_id: str | None = None) -> SessionRates:
    """The body of :func:`store_session_rates`, callable outside a flow run."""
    metrics = _trace_metrics(settings)
    written = unchanged = missing = 0
    ids = list(dict.fromkeys(session_ids))
    computed: dict[str, None] = {}
    by_metric: dict[str, tuple[int, int]] = {}
    for start in range(0, len(ids), SESSIONS_PER_QUERY):
        with engine_for(settings).begin() as conn:
            sessions = read_session_turns(conn, ids[start:start + SESSIONS_PER_QUERY], list(metrics))
            rows: list[dict] = []
            for session in sessions:
                made, none = rate_rows(settings, session, metrics, flow_run_id)
                rows += made
                missing += none
            for row in rows:
                computed[row["trace_id"]] = None
                n, passed = by_metric.get(row["metric"], (0, 0))
                by_metric[row["metric"]] = (n + 1, passed + bool(row["passed"]))
            stored = store_session_rows(conn, rows, owner=flow_run_id or "store-session-rates")
        written += len(stored)
        unchanged += len(rows) - len(stored)
    log.info("session rates: %d written, %d unchanged, %d with no scored turn", written, unchanged, missing)
    return SessionRates(written=written, unchanged=unchanged, no_scored_turn=missing, sessions=tuple(computed),
                        by_metric=by_metric)


# retries=1: the write is idempotent (an unchanged row is left alone)
@task(name="store-session-rates", cache_policy=NO_CACHE, persist_result=False, retries=1, retry_delay_seconds=1)
def store_session_rates(settings: Settings, session_ids: Sequence[str]) -> SessionRates:
    """Compute and store each trace metric's session rate of ``session_ids`` (sessions recorded in
    judgeflow.sessions; an unknown id is ignored): one query per batch of sessions, zero judge calls."""
    return store_rates(settings, session_ids, flow_run_id=flow_run.get_id())
