"""The run's gate and each pair's (judgeflow/run/gate.py): whether a pair may start, asked as its first
call is sent, for each reason it may not; and ownership before every later attempt, a clock reading while
the claims are fresh. The database side of ownership (a pair another run took) is in tests/db/test_leases.py
and tests/tasks/test_claims.py; the gate through the judges in tests/judge/test_send_gate.py."""

from __future__ import annotations

import asyncio
import math

from judgeflow.config.settings import Settings
from judgeflow.judge.send_gate import Call
from judgeflow.run.budget import RunBudget
from judgeflow.run.entry import StopRequest
from judgeflow.run.gate import SPEND_SPENT, STOPPED, TIME_SPENT
from judgeflow.run.policy import RunPolicy
from tests.run.test_budget import PRICES, work

SETTINGS = Settings(_env_file=None)


def _asked(pair_gate, times: int = 1) -> list[bool]:
    """What ``times`` attempts of one call asking ``pair_gate`` are told."""
    call = Call(pair_gate, ())

    async def ask() -> list[bool]:
        return [await call.may_send() for _ in range(times)]

    return asyncio.run(ask())


def test_a_pair_starts_while_nothing_refuses_and_is_not_cut_by_the_spend_once_started():
    budget = RunBudget(1.0, PRICES)
    run = RunPolicy(SETTINGS, "run-1", budget=budget, deadline=math.inf)
    gate = run.pair(work(), claimed_at=1.0)  # no keeper, a known claim time: fresh
    assert gate.fresh_until() == -math.inf  # not started: the first attempt always asks
    assert _asked(gate, 2) == [True, True]
    assert gate.started and gate.refused is None and gate.fresh_until() == math.inf
    budget.charge(work("other"), 2.0, 1)  # the spend passed the budget meanwhile
    assert _asked(gate, 2) == [True, True]  # its next calls still go: they would waste what it paid
    assert run.pair(work("t2"), 1.0).why_not_run() is None  # the spend does not stop a re-run here


def test_each_reason_a_pair_may_not_start_is_its_own():
    stop = StopRequest()
    now = [0.0]
    budget = RunBudget(1.0, PRICES)
    run = RunPolicy(SETTINGS, "run-1", stop=stop, deadline=10.0, budget=budget, clock=lambda: now[0])

    budget.charge(work("other"), 1.0, 1)  # the spend reached the budget
    spent = run.pair(work("a"), 1.0)
    assert _asked(spent) == [False] and spent.refused is SPEND_SPENT and not spent.started
    assert spent.refused.why == "the run's spend budget is spent" and budget.exhausted
    assert run.why_not_claim() is None  # claiming stops on the budget's estimates, in the schedule

    now[0] = 10.0  # the time budget ran out
    late = run.pair(work("b"), 1.0)
    assert _asked(late) == [False] and late.refused is TIME_SPENT
    assert late.refused.why == "the run's time budget is spent" and late.why_not_run() is TIME_SPENT
    assert run.why_not_claim() is TIME_SPENT and TIME_SPENT.end == "deadline"

    stop.request()  # Ctrl-C
    stopped = run.pair(work("c"), 1.0)
    assert _asked(stopped) == [False] and stopped.refused is STOPPED
    assert stopped.refused.why == "the run was stopped" and stopped.why_not_run() is STOPPED
    assert STOPPED.end == "stopped"


def test_a_stop_asked_while_the_pair_waited_for_its_slot_leaves_it_unsent():
    stop = StopRequest()
    gate = RunPolicy(SETTINGS, "run-1", stop=stop).pair(work(), 1.0)
    stop.request()  # before its turn came
    assert _asked(gate) == [False] and gate.refused is STOPPED and not gate.started


class _Keeper:
    """What the gate asks of a lease keeper: until when the claims are fresh."""

    def __init__(self, until: float) -> None:
        self.until = until
        self.asked: list[float | None] = []

    def fresh_until(self, claimed_at: float | None) -> float:
        self.asked.append(claimed_at)
        return self.until


def test_fresh_claims_cost_a_clock_reading_and_a_pair_not_claimed_is_never_checked():
    keeper = _Keeper(until=math.inf)
    gate = RunPolicy(SETTINGS, "run-1", keeper=keeper).pair(work(), claimed_at=5.0)
    assert _asked(gate, 3) == [True, True, True]
    assert keeper.asked and set(keeper.asked) == {5.0}  # the batch's claim time, no database
    assert gate.fresh_until() == math.inf

    unclaimed = RunPolicy(SETTINGS, None).pair(work(), None)  # a shadow run's pair
    assert _asked(unclaimed) == [True] and unclaimed.fresh_until() == math.inf
    no_keeper = RunPolicy(SETTINGS, "run-1")
    assert no_keeper.fresh_until(None) == -math.inf  # claimed at a time nobody knows: checked
    assert no_keeper.fresh_until(5.0) == math.inf  # claimed at a known time, nothing says it lapsed
