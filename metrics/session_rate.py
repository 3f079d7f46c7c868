"""A session's rate of a trace metric: ``M_session`` from its turns' ``M`` results, no judge asked.

A session fails ``M_session`` when any of its turns failed ``M`` (scored, ``passed`` false). Its score is
the share of its scored turns that failed, not the highest turn score: a trace metric's scores run either
way (a G-Eval metric's higher is better) and each has its own threshold, while a share of failed turns means
the same for every metric, is 0 exactly when the session passes (threshold 0, lower is better) and says how
much of the conversation went wrong. ``JUDGEFLOW_<M>_SESSION_THRESHOLD`` may allow a share of failed turns.

A session none of whose turns has a scored ``M`` result (none scored yet, or every one skipped or failed)
gets no ``M_session`` result at all: nothing is written, so it is neither a pass by default nor a skip
counted in the rates; it gets one once a turn is scored and the rate is computed again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from judgeflow.metrics.registry import SESSION_RATE_VERSION
from judgeflow.metrics.result import MetricResult


@dataclass(frozen=True)
class TurnResult:
    """One turn's result of the trace metric: its status ('scored', 'skipped', 'failed'; None: no result
    yet) and whether it passed."""

    status: str | None
    passed: bool | None


def session_rate(name: str, turns: Sequence[TurnResult], *, threshold: float = 0.0) -> MetricResult | None:
    """Session rate ``name``'s result over a session's ``turns`` (every turn of the session, in order),
    or None when no turn has a scored result."""
    scored = [turn for turn in turns if turn.status == "scored" and turn.passed is not None]
    if not scored:
        return None
    failed = sum(1 for turn in scored if turn.passed is False)
    score = failed / len(scored)
    return MetricResult(
        name=name, score=score, passed=score <= threshold, threshold=threshold, metric_version=SESSION_RATE_VERSION,
        reason=f"{failed} of {len(scored)} scored turns failed",
        details={"turns": len(turns), "scored_turns": len(scored), "failed_turns": failed},
        cost_usd=0.0,
    )
