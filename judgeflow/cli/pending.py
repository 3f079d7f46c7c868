"""Whether `judgeflow score` has anything to score, asked before any flow run
is started: when nothing is pending it starts none and imports neither
Prefect, the flows nor litellm."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings


def anything_pending(settings: "Settings", *, since: datetime | None, until: datetime | None,
                     sample_rate: float, retry_failed: bool = False, metrics: list[str] | None = None) -> bool:
    """The run's own answer (:func:`judgeflow.db.pending_work.anything_pending`:
    its read plan and its definition of done). Any doubt (no schema yet, an
    error) means yes. ``metrics``: those the run scores (None: every registered one).: run the flow, which records what went wrong."""
    from sqlalchemy.exc import SQLAlchemyError

    from judgeflow.db.pending_work import anything_pending as run_has_pending
    from judgeflow.errors import JudgeflowError
    from judgeflow.metrics.registry import at_level, chosen

    # the source's pairs are of trace metrics; a session metric's wait on quiet sessions (_sessions_due)
    traced = at_level(chosen(metrics), "trace")
    try:
        return run_has_pending(settings, traced, since=since, until=until, sample_rate=sample_rate,
                               retry_failed=retry_failed) or _budget_raised(settings, ranged=since or until) \
            or _sessions_due(settings, ranged=since or until)
    except (SQLAlchemyError, JudgeflowError):
        return True


def _budget_raised(settings: "Settings", *, ranged) -> bool:
    """A larger sample budget than tonight's earlier runs had, with traces they
    left out still waiting: the run judges more of them (judgeflow/sampling/planner.py)."""
    if settings.sample_budget_usd is None or ranged:
        return False
    from judgeflow.db.engine import engine_for
    from judgeflow.sampling.decisions import could_raise

    with engine_for(settings).connect() as conn:
        return could_raise(conn, settings.sample_budget_usd)


def _sessions_due(settings: "Settings", *, ranged) -> bool:
    """A session gone quiet with turns no judging saw: a nightly run judges and marks it (docs/metrics.md,
    "Conversations") even when no trace is pending."""
    if ranged:
        return False
    from judgeflow.db.engine import engine_for
    from judgeflow.db.sessions import sessions_due
    from judgeflow.sources.identity import result_source

    with engine_for(settings).connect() as conn:
        return sessions_due(conn, result_source(settings), settings.session_idle_s)
