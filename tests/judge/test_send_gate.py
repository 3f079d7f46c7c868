"""The send gate: asked before every attempt a judge sends, over real HTTP to
the local judge server, in the run's process and through judge worker processes."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

from judgeflow.errors import CallWithheld, TransientJudgeError
from judgeflow.judge.pool.process_pool import JudgeProcessPool
from judgeflow.judge.send_gate import Call
from tests.judge.test_litellm_judge import both_http_paths, http_path, make_judge, opinions_request  # noqa: F401
from tests.judge.test_process_pool import pool_settings
from tests.support.judge_server import JudgeServer, Reply, error_reply, rule_responder


class Gate:
    """Fresh until ``until`` (time.monotonic()); past it, ``allowed`` answers."""

    def __init__(self, until: float = -math.inf, allowed: bool = True) -> None:
        self.until, self.allowed, self.asked = until, allowed, 0

    def fresh_until(self) -> float:
        return self.until

    async def confirm(self) -> bool:
        self.asked += 1
        return self.allowed


@pytest.fixture
def server():
    with JudgeServer() as srv:
        yield srv


async def _gated(judge, gate: Gate):
    return await judge.acomplete(opinions_request(), Call(gate))


@both_http_paths
async def test_a_call_waiting_for_a_slot_asks_its_gate_when_it_gets_one_and_is_not_sent(server):
    server.hold()
    judge = make_judge(server, max_concurrency=1)
    gate = Gate(allowed=True)
    first = asyncio.ensure_future(judge.acomplete(opinions_request()))
    await _until(lambda: server.held == 1, "the first call to hold the only slot on the wire")
    waiting = asyncio.ensure_future(_gated(judge, gate))
    await _until(lambda: judge._slots._waiting == 1, "the gated call to wait for the slot")
    assert gate.asked == 0  # not asked while it waits for a slot
    gate.allowed = False  # the pair was taken over while its call waited for the slot
    server.release()
    await first
    with pytest.raises(CallWithheld) as withheld:
        await waiting
    assert server.calls() == 1 and gate.asked == 1
    assert withheld.value.billed.calls == 0  # nothing of it was sent, nothing billed


@both_http_paths
async def test_a_retry_is_not_sent_once_the_gate_refuses_and_the_sent_attempt_stays_billed(server):
    server.script(error_reply(500, "boom"))
    judge = make_judge(server, max_retries=3)

    class RefusesTheRetry(Gate):
        async def confirm(self) -> bool:
            self.asked += 1
            return self.asked == 1

    gate = RefusesTheRetry()
    with pytest.raises(CallWithheld) as withheld:
        await _gated(judge, gate)
    assert server.calls() == 1 and gate.asked == 2
    assert withheld.value.billed.calls == 1  # the 500 reached the provider


async def test_a_fresh_gate_is_not_asked(server):
    gate = Gate(until=math.inf, allowed=False)
    reply = await _gated(make_judge(server), gate)
    assert reply.calls == 1 and gate.asked == 0 and server.calls() == 1



# ---- through a judge worker process ------------------------------------------
#
# A call handed to a worker goes with the time its pair's claims are fresh
# until; the worker sends no attempt past it but hands the call back, and the
# run's gate decides again. Every wait is bounded: a hand-back loop that never
# ends fails the test instead of hanging it.

HANDOFF_S = 3.0  # how long a gated call's claims stay fresh after it is handed to the worker
BOUND_S = 60.0  # no scenario here takes longer


class Holding:
    """A responder that holds the first request until :meth:`release`, then
    answers it with ``first`` (default: as the rule-based judge); the others at once."""

    def __init__(self, first: Reply | None = None) -> None:
        self.first, self._released, self._held = first, threading.Event(), False
        self._lock = threading.Lock()

    def __call__(self, req):
        with self._lock:
            hold, self._held = not self._held, True
        if hold:
            self._released.wait(BOUND_S)
            if self.first is not None:
                return self.first
        return rule_responder(req)

    def release(self) -> None:
        self._released.set()


class Renews(Gate):
    """Confirms, and its freshness moves on as a renewed lease's does."""

    async def confirm(self) -> bool:
        self.asked += 1
        self.until = time.monotonic() + BOUND_S
        return True


@pytest.fixture(scope="module")
def worker_server():
    with JudgeServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def one_worker(worker_server):
    """One judge worker process with one call on the wire at a time (its start imports litellm: seconds)."""
    config = pool_settings(worker_server, max_concurrency=1, judge_processes=1, judge_max_retries=1)
    with JudgeProcessPool(config) as pool:
        pool.start()
        assert pool.wait_ready(BOUND_S)
        yield pool


@pytest.fixture
def worker(worker_server, one_worker):
    worker_server.reset()
    yield worker_server, one_worker
    worker_server.responder = rule_responder


def _bounded(scenario):
    return asyncio.run(asyncio.wait_for(scenario, BOUND_S))


async def _until(predicate, what: str) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), BOUND_S)
    except asyncio.TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


async def _handed_to_the_worker(pool, before: int, gate: Gate) -> None:
    """Wait until the gated call went to the worker, and check it went while its claims were fresh."""
    await _until(lambda: sum(pool.calls_per_worker()) == before + 1, "the call to reach the worker")
    assert time.monotonic() < gate.until, "the call reached the worker only after its claims went stale"


async def _stale(gate: Gate) -> None:
    await asyncio.sleep(max(0.0, gate.until - time.monotonic()) + 0.1)


def test_a_call_whose_claims_went_stale_in_a_worker_is_handed_back_and_not_sent_when_the_run_refuses(worker):
    server, pool = worker
    holding = server.responder = Holding()
    gate = Gate(allowed=False)  # the pair is taken over while its call waits in the worker
    before = sum(pool.calls_per_worker())

    async def scenario() -> CallWithheld:
        first = asyncio.ensure_future(pool.acomplete(opinions_request("I think the first is fine.")))
        await _until(lambda: server.in_flight == 1, "the first call to take the worker's one slot")
        gate.until = time.monotonic() + HANDOFF_S
        waiting = asyncio.ensure_future(_gated(pool, gate))
        await _handed_to_the_worker(pool, before + 1, gate)
        await _stale(gate)  # its claims go stale while it waits for the worker's slot
        holding.release()
        await first
        with pytest.raises(CallWithheld) as withheld:
            await waiting
        return withheld.value

    withheld = _bounded(scenario())
    assert server.calls() == 1  # the first call only: the worker handed the stale one back unsent
    assert gate.asked == 1  # by the run, once the worker had handed the call back
    assert sum(pool.calls_per_worker()) == before + 2  # and it did not go to the worker again
    assert withheld.billed.calls == 0  # nothing of it was sent, nothing billed


def test_a_call_handed_back_by_a_worker_is_sent_once_the_run_confirms_and_keeps_its_earlier_spend(worker):
    server, pool = worker
    # its first attempt is sent while fresh and answered (a 500) only once its claims are stale
    holding = server.responder = Holding(error_reply(500, "boom"))
    gate = Renews()
    before = sum(pool.calls_per_worker())

    async def scenario():
        gate.until = time.monotonic() + HANDOFF_S
        call = asyncio.ensure_future(_gated(pool, gate))
        await _handed_to_the_worker(pool, before, gate)
        await _until(lambda: server.in_flight == 1, "its first attempt to reach the judge")
        await _stale(gate)
        holding.release()  # the 500: the run's retry loop asks the gate again, past the claims' freshness
        return await call

    reply = _bounded(scenario())
    assert gate.asked == 1  # the run confirmed (its lease renewed) and handed the retry over
    assert sum(pool.calls_per_worker()) == before + 2
    assert server.calls() == 2  # the 500, then the retry the run confirmed
    assert reply.calls == 2  # the attempt sent before the hand-back is billed too


def test_a_fresh_gate_costs_no_confirm_through_a_worker(worker):
    server, pool = worker
    gate = Gate(until=math.inf, allowed=False)
    reply = _bounded(_gated(pool, gate))
    assert reply.calls == 1 and gate.asked == 0 and server.calls() == 1


def test_a_call_confirmed_without_fresh_claims_is_not_handed_to_a_worker_and_fails_as_transient(worker):
    # the run's lease could not be renewed: a worker would hand it back at once, for ever
    server, pool = worker
    gate = Gate(allowed=True)
    before = sum(pool.calls_per_worker())
    with pytest.raises(TransientJudgeError) as unsent:
        _bounded(_gated(pool, gate))
    assert not isinstance(unsent.value, CallWithheld)
    # each attempt of the retry loop asks the gate again; none goes to the worker
    assert gate.asked == pool.retry.attempts == 2
    assert server.calls() == 0 and sum(pool.calls_per_worker()) == before
    assert unsent.value.billed.calls == 0
