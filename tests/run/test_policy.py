"""The run policy's decisions (judgeflow/run/policy.py), each with each of its refusals: may a pair be
admitted (the spend budget), may its first call go (stop, time, spend, the account limit), may it be sent
again (each retry level). The gate's ownership side is in tests/run/test_gate.py."""

from __future__ import annotations

import asyncio
import random
import math

from judgeflow.config.settings import Settings
from judgeflow.errors import InvalidJudgeReplyError, TransientJudgeError
from judgeflow.judge.base import Usage
from judgeflow.judge.retry import CallRetry, GiveUp, Retry, RetryPolicy
from judgeflow.run.budget import Reservation, RunBudget, run_budget
from judgeflow.run.entry import StopRequest
from judgeflow.run.gate import SPEND_SPENT, STOPPED, TIME_SPENT, Refusal
from judgeflow.run.policy import NO_RETRY_ROOM, RunPolicy
from tests.run.test_budget import PRICES, work

SETTINGS = Settings(_env_file=None)
RETRY = RetryPolicy(call=CallRetry(max_retries=1, backoff_base_s=0.0), pair_reruns=2, rerun_delay_s=1.0, repairs=1)


def _start(policy: RunPolicy):
    return asyncio.run(policy.why_not_start())


def test_it_is_built_from_the_settings_with_nothing_refused():
    policy = RunPolicy(SETTINGS)
    assert policy.retry == RetryPolicy.from_settings(SETTINGS)
    assert policy.account is None and policy.budget is None and policy.owner is None
    assert policy.why_not_claim() is None and policy.why_not_run() is None and _start(policy) is None
    assert policy.admit(work(), Reservation()) and policy.fresh_until(None) == math.inf


def test_each_reason_not_to_start_is_its_own():
    stop, now, budget = StopRequest(), [0.0], RunBudget(1.0, PRICES)
    policy = RunPolicy(SETTINGS, "run-1", stop=stop, deadline=10.0, budget=budget, clock=lambda: now[0])
    assert _start(policy) is None
    budget.charge(work("other"), 1.0, 1)
    assert _start(policy) is SPEND_SPENT and policy.why_not_claim() is None
    now[0] = 10.0
    assert _start(policy) is TIME_SPENT and policy.why_not_claim() is TIME_SPENT
    stop.request()
    assert _start(policy) is STOPPED and policy.why_not_run() is STOPPED


class _Account:
    def __init__(self, refusal):
        self.refusal, self.asked = refusal, 0

    async def why_not(self):
        self.asked += 1
        return self.refusal


def test_the_account_limit_is_asked_last_before_a_first_call():
    busy = Refusal("account", "the account's rate limit is reached")
    account = _Account(busy)
    assert _start(RunPolicy(SETTINGS, account=account)) is busy and account.asked == 1
    stop = StopRequest()
    stop.request()
    assert _start(RunPolicy(SETTINGS, stop=stop, account=account)) is STOPPED and account.asked == 1
    assert _start(RunPolicy(SETTINGS, account=_Account(None))) is None


def test_admission_waits_for_work_in_flight_before_it_says_no_and_then_stays_no():
    budget = RunBudget(work_cost := RunBudget(1.0, PRICES).estimate(work())[1] * 2.5, PRICES)
    policy, reservation = RunPolicy(SETTINGS, budget=budget), Reservation()
    assert policy.admit(work("a"), reservation) and policy.admit(work("b"), reservation)
    finished = []

    def finish_one() -> bool:  # what a finished pair cost: nothing (a skipped one)
        if not reservation.pairs:
            return False
        key = next(iter(reservation.pairs))
        budget.close_one(reservation, key, 0.0)
        finished.append(key)
        return True

    assert policy.admit(work("c"), reservation, finish_one) and finished == [("a", "toxicity")]
    assert not policy.admit(work("d"), reservation) and budget.exhausted  # no waiting: no
    assert not policy.admit(work("e"), Reservation(), lambda: False)  # exhausted stays so
    assert budget.limit_usd == work_cost


def test_one_budget_chosen_the_smaller_of_the_run_and_the_night():
    assert run_budget(Settings(_env_file=None)) is None
    priced = Settings(_env_file=None, judge_input_cost_per_mtok=1.0, judge_output_cost_per_mtok=2.0)
    assert run_budget(priced.model_copy(update={"run_budget_usd": 5.0})).limit_usd == 5.0
    assert run_budget(priced.model_copy(update={"run_budget_usd": 5.0}), 3.0, 10.0).limit_usd == 3.0
    assert run_budget(priced.model_copy(update={"run_budget_usd": 2.0}), 3.0, 10.0).limit_usd == 2.0
    assert run_budget(priced, 3.0, 10.0).limit_usd == 3.0


def test_each_retry_level_decides_in_one_place():
    transient, invalid = TransientJudgeError("503"), InvalidJudgeReplyError("not JSON", step="s", raw="x", attempts=1)
    rng = random.Random(3)
    # attempts per call: CallRetry.plan, what the judge's one loop asks (a delay, or the error that ends the call)
    assert isinstance(RETRY.call.plan(0, transient, rng), float)
    assert not isinstance(RETRY.call.plan(1, transient, rng), float)  # max_retries 1: two attempts
    assert not isinstance(RETRY.call.plan(0, invalid, rng), float)
    # runs per pair: RetryPolicy.rerun, asked through RunPolicy.resend
    assert [RETRY.rerun(n, transient) for n in (1, 2, 3)] == [Retry(1.0), Retry(2.0), GiveUp("503")]
    assert RETRY.rerun(1, invalid) == GiveUp("not JSON")  # only a transient error runs again
    # rounds per reply: the bound the metrics get
    assert RETRY.repairs == 1 and RETRY.worst_case_sends() == 2 * 3 * 2


def test_a_pair_runs_again_only_while_the_spend_budget_has_room_for_it():
    budget = RunBudget(1.0, PRICES)
    policy = RunPolicy(SETTINGS, "run-1", budget=budget, retry=RETRY)
    billed = Usage()
    assert policy.resend(1, TransientJudgeError("503"), work=work(), billed=billed) == Retry(1.0)
    billed.cost_usd, billed.calls = 2.0, 1  # what the failed run billed passes the budget
    assert policy.resend(1, TransientJudgeError("503"), work=work(), billed=billed) is NO_RETRY_ROOM
    assert NO_RETRY_ROOM.later and budget.exhausted and budget.spent_usd == 2.0
