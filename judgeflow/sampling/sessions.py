"""Sampling with the session as the unit (issue 57, item 5; docs/metrics.md, "Conversations").

On a night under a sample budget the quiet sessions' pairs come after the night's traces
(flows/scoring.py), so what they may spend is what the run's one budget (judgeflow/run/budget.py)
has left once the traces are judged. When judging every quiet session fits it, all are judged and
no decision is recorded (they weigh 1, as a night judged in full). Otherwise a simple random sample
of them is judged, as many as fit at their mean estimated cost (every session metric over the
whole conversation): the ``n`` with the smallest selection key (judgeflow/sampling/selection.py),
each with inclusion probability ``n / N``, recorded in ``sample_decisions`` under the session's
result id in the phase 'session', so its results weigh ``1 / p`` through the join a trace's use.
The run's weights are settled on what was judged (:func:`judgeflow.sampling.decisions.settle`).

A session not selected is decided out for the turns it has: marked as if judged
(judgeflow/db/sessions.py, :func:`decide_out`), so it is not due again, and considered afresh only
once it grows, as a trace left out of a night's sample is not judged by a later night. A selected
session a stop or the budget left unjudged stays due and selected for the next run.
"""

from __future__ import annotations

import math
from datetime import date
from typing import Sequence

from sqlalchemy import Connection

from judgeflow.db.sessions import QuietSession, decide_out
from judgeflow.sampling import decisions
from judgeflow.sampling.selection import select
from judgeflow.sources.types import TraceKey

STRATUM = "sessions"
PHASE = "session"


def sample_size(costs: Sequence[float], left_usd: float) -> int | None:
    """How many of the sessions costing ``costs`` fit ``left_usd`` at their mean; None: all of them fit."""
    total = sum(costs)
    if total <= left_usd:
        return None
    return min(len(costs), max(0, math.floor(left_usd / (total / len(costs)))))


def decide(conn: Connection, night: date, sessions: Sequence[QuietSession], costs: dict[str, float],
           left_usd: float, flow_run_id: str | None) -> list[QuietSession]:
    """Decide on ``sessions`` (none decided for their current turns) under ``left_usd``; the ones to
    judge. Earlier decisions on them (for fewer turns) are dropped: a grown session is a new unit."""
    decisions.forget(conn, [s.session_id for s in sessions])
    n = sample_size([costs[s.session_id] for s in sessions], left_usd)
    if n is None:
        return list(sessions)
    chosen = select([s.session_id for s in sessions], n, night)
    mean = sum(costs.values()) / len(costs)
    keys = [TraceKey(s.session_id, s.last_turn_at) for s in sessions]
    decisions.record(conn, night, STRATUM, keys, chosen, inclusion_prob=max(n / len(sessions), 1e-9),
                     cost_per_trace=mean, flow_run_id=flow_run_id, phase=PHASE)
    decide_out(conn, [s for s in sessions if s.session_id not in chosen])
    return [s for s in sessions if s.session_id in chosen]
