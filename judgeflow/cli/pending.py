"""Whether `judgeflow score` has anything to score, asked before any flow run
is started: when nothing is pending it starts none and imports neither
Prefect, the flows nor litellm."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from judgeflow.settings import Settings


def anything_pending(settings: "Settings", *, since: datetime | None, until: datetime | None,
                     sample_rate: float) -> bool:
    """Whether a scoring run would find a (trace, metric) pair to score: the
    run's own read plan (judgeflow/db/watermark.py ``plan_reads``) and its
    count of pending pairs (judgeflow/db/pending_work.py), as the run's
    plan-source-reads and count-pending-work tasks call them, without the
    settle delay or the given-up filter (which can only exclude more). Any
    doubt (no schema yet, an error) means yes: run the flow."""
    from sqlalchemy.exc import SQLAlchemyError

    from judgeflow.db.engine import engine_for
    from judgeflow.db.pairs import Done
    from judgeflow.db.pending_work import count_plan_pending
    from judgeflow.db.trace_source import source_engine, trace_source
    from judgeflow.db.watermark import plan_reads
    from judgeflow.errors import JudgeflowError
    from judgeflow.tasks.work import METRIC_NAMES

    metrics = list(METRIC_NAMES)
    try:
        source, engine = trace_source(settings), engine_for(settings)
        with engine.connect() as conn:
            plan = plan_reads(conn, source, metrics, lookback_s=settings.source_lookback_s, sample_rate=sample_rate,
                              ranged=since is not None or until is not None)
        counts = count_plan_pending(source, source_engine(settings), engine, plan, metrics, done=Done(),
                                    since=since, until=until, sample_rate=sample_rate, limit_pairs=1)
    except (SQLAlchemyError, JudgeflowError):
        return True
    return sum(counts.values()) > 0
