"""Whether a pair may start: asked as its first judge call is sent, not as the pair is submitted.

A run does not admit its pairs by a limit of their own: every pair of the
batches in flight starts at once, and its judge calls wait for the judge's
slots (judgeflow/judge/wire_slots.py). So what decides whether a pair may
still start (the run's time budget, a stop request, the spend budget:
``why_not``) is asked where its first call leaves: :class:`StartGate` wraps
the pair's send gate (judgeflow/judge/send_gate.py, the claims' freshness)
and is asked once that call holds its slot. Pairs waiting for a slot do not
all pass the check at once: each passes it when it is its turn to be sent,
after the spend of the pairs before it was charged, and a stop or the end of
the time budget leaves every pair still waiting for the next run.

The pair's later attempts (its metric's next calls, the judge's retries)
are asked only what the claims allow: the pair is paid for in part already,
and cutting it between its calls would waste what they cost. A retry of the
whole pair after a transient error is checked by the pair's own loop
(tasks/scoring.py ``judge_pair``).
"""

from __future__ import annotations

import math
import time
from typing import Callable

from judgeflow.judge.send_gate import SendGate, send_gate


class StartGate:
    """``claims`` (a :class:`~judgeflow.judge.send_gate.SendGate`), and before
    the pair's first attempt, ``why_not()``: None to start, else why the pair
    is left for the next run (see the module doc)."""

    def __init__(self, claims: SendGate, why_not: Callable[[], str | None]) -> None:
        self._claims, self._why_not = claims, why_not
        self.started = False  # an attempt of the pair was let through
        self.not_started: str | None = None  # why its first attempt was refused

    def fresh_until(self) -> float:
        # before the first attempt the gate is never fresh: confirm() is asked, and why_not() with it
        return self._claims.fresh_until() if self.started else -math.inf

    async def confirm(self) -> bool:
        if not self.started:
            self.not_started = self._why_not()
            if self.not_started is not None:
                return False
            self.started = True
            if time.monotonic() < self._claims.fresh_until():
                return True
        return await self._claims.confirm()


def why_not_started() -> str | None:
    """Why this context's send gate refused to start the pair, if it did
    (None: it did not, or another gate refused: the claims)."""
    gate = send_gate.get()
    return gate.not_started if isinstance(gate, StartGate) else None
