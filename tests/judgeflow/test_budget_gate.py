"""SpendGate: a pair's first attempt asks the spend budget as it is sent, its later ones only the claims."""

from __future__ import annotations

import asyncio
import math
import time

from judgeflow.budget import RunBudget
from judgeflow.budget_gate import SpendGate, refused_for_budget
from judgeflow.judge.send_gate import may_send, send_gate
from tests.judgeflow.test_budget import PRICES, work


class Claims:
    """The claims' gate: fresh until ``until``, then ``confirm`` answers ``owned``."""

    def __init__(self, until: float = math.inf, owned: bool = True) -> None:
        self.until, self.owned, self.confirmed = until, owned, 0

    def fresh_until(self) -> float:
        return self.until

    async def confirm(self) -> bool:
        self.confirmed += 1
        return self.owned


def sent(gate) -> list[bool]:
    async def ask() -> list[bool]:
        send_gate.set(gate)
        return [await may_send(), await may_send()]

    return asyncio.run(ask())


def test_a_pair_starts_while_the_budget_has_room_and_is_not_cut_once_started():
    budget = RunBudget(1.0, PRICES)
    claims = Claims()
    gate = SpendGate(claims, budget)

    assert sent(gate) == [True, True]
    assert gate.started and not gate.over_budget and claims.confirmed == 0  # fresh claims: no database
    budget.charge(work(), 2.0, 1)  # the spend passed the budget meanwhile
    assert sent(gate) == [True, True]  # its next calls still go: they would waste what it paid


def test_a_pair_not_started_when_the_spend_reached_the_budget_is_refused_and_says_why():
    budget = RunBudget(1.0, PRICES)
    budget.charge(work("other"), 1.0, 1)
    gate = SpendGate(Claims(), budget)

    async def ask() -> tuple[bool, bool]:
        send_gate.set(gate)
        return await may_send(), refused_for_budget()

    assert asyncio.run(ask()) == (False, True)
    assert not gate.started and budget.exhausted


def test_the_claims_still_decide_once_stale():
    claims = Claims(until=time.monotonic() - 1, owned=False)
    gate = SpendGate(claims, RunBudget(1.0, PRICES))

    async def ask() -> tuple[bool, bool]:
        send_gate.set(gate)
        return await may_send(), refused_for_budget()

    assert asyncio.run(ask()) == (False, False)  # the budget had room: refused by the claims
    assert gate.started and claims.confirmed == 1
