"""StartGate: a pair's first attempt asks whether the pair may start as it is sent; its later ones only the claims."""

from __future__ import annotations

import asyncio
import math
import time

from judgeflow.run.budget import RunBudget
from judgeflow.judge.send_gate import may_send, send_gate
from judgeflow.run.start_gate import StartGate, why_not_started
from tests.judgeflow.test_budget import PRICES, work

SPENT = "the run's spend budget is spent"


class Claims:
    """The claims' gate: fresh until ``until``, then ``confirm`` answers ``owned``."""

    def __init__(self, until: float = math.inf, owned: bool = True) -> None:
        self.until, self.owned, self.confirmed = until, owned, 0

    def fresh_until(self) -> float:
        return self.until

    async def confirm(self) -> bool:
        self.confirmed += 1
        return self.owned


def budget_check(budget: RunBudget):
    return lambda: None if budget.has_room() else SPENT


def asked(gate, times: int = 1) -> tuple[list[bool], str | None]:
    async def ask() -> tuple[list[bool], str | None]:
        send_gate.set(gate)
        return [await may_send() for _ in range(times)], why_not_started()

    return asyncio.run(ask())


def test_a_pair_starts_while_the_budget_has_room_and_is_not_cut_once_started():
    budget = RunBudget(1.0, PRICES)
    claims = Claims()
    gate = StartGate(claims, budget_check(budget))

    assert asked(gate, 2) == ([True, True], None)
    assert gate.started and claims.confirmed == 0  # fresh claims: no database
    budget.charge(work(), 2.0, 1)  # the spend passed the budget meanwhile
    assert asked(gate, 2) == ([True, True], None)  # its next calls still go: they would waste what it paid


def test_a_pair_not_started_when_the_spend_reached_the_budget_is_refused_and_says_why():
    budget = RunBudget(1.0, PRICES)
    budget.charge(work("other"), 1.0, 1)
    gate = StartGate(Claims(), budget_check(budget))

    assert asked(gate) == ([False], SPENT)
    assert not gate.started and budget.exhausted


def test_a_stop_asked_while_the_pair_waited_for_its_slot_leaves_it_unsent():
    stopped: list[str] = []
    gate = StartGate(Claims(), lambda: stopped[0] if stopped else None)
    stopped.append("the run was stopped")  # Ctrl-C, or the time budget, before its turn came
    assert asked(gate) == ([False], "the run was stopped")


def test_the_claims_still_decide_once_stale():
    claims = Claims(until=time.monotonic() - 1, owned=False)
    gate = StartGate(claims, lambda: None)

    assert asked(gate) == ([False], None)  # it may start: refused by the claims
    assert gate.started and claims.confirmed == 1
