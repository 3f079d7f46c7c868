"""A pair's send gate with the run's spend budget in it (``JUDGEFLOW_RUN_BUDGET_USD``).

A run does not admit its pairs by a limit of their own: every pair of the
batches in flight starts, and its judge calls wait for the judge's slots
(judgeflow/judge/wire_slots.py). So the budget is asked where a call leaves,
not where a pair starts: :class:`SpendGate` wraps the pair's send gate
(judgeflow/judge/send_gate.py, the claims' freshness) and lets the pair's
**first** attempt go only while :meth:`judgeflow.budget.RunBudget.has_room`,
asked once that attempt holds its slot. Pairs waiting for a slot therefore
do not all pass the check at once: each passes it when it is its turn to be
sent, after the spend of the pairs before it was charged.

The pair's later attempts (its metric's next calls, the judge's retries) are
asked only what the claims allow: the pair is paid for in part already, and
cutting it between its calls would waste what they cost. A retry of the
whole pair after a transient error is the budget's own check
(:meth:`~judgeflow.budget.RunBudget.charge_retry`).
"""

from __future__ import annotations

import math
import time

from judgeflow.budget import RunBudget
from judgeflow.judge.send_gate import SendGate, send_gate


class SpendGate:
    """``claims`` (a :class:`~judgeflow.judge.send_gate.SendGate`), and before
    the pair's first attempt, ``budget`` (see the module doc)."""

    def __init__(self, claims: SendGate, budget: RunBudget) -> None:
        self._claims, self._budget = claims, budget
        self.started = False  # an attempt of the pair was let through
        self.over_budget = False  # the budget refused the pair's first attempt

    def fresh_until(self) -> float:
        # before the first attempt the gate is never fresh: confirm() is asked, and with it the budget
        return self._claims.fresh_until() if self.started else -math.inf

    async def confirm(self) -> bool:
        if not self.started:
            if not self._budget.has_room():
                self.over_budget = True
                return False
            self.started = True
            if time.monotonic() < self._claims.fresh_until():
                return True
        return await self._claims.confirm()


def refused_for_budget() -> bool:
    """Whether this context's send gate refused an attempt because the budget was spent."""
    gate = send_gate.get()
    return isinstance(gate, SpendGate) and gate.over_budget
