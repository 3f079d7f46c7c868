"""The send gate: asked before every attempt a judge sends, over real HTTP to
the local judge server, in the run's process and through judge worker processes."""

from __future__ import annotations

import asyncio
import math

import pytest

from judgeflow.errors import CallWithheld
from judgeflow.judge.send_gate import send_gate
from tests.judge.test_litellm_judge import both_http_paths, http_path, make_judge, opinions_request  # noqa: F401
from tests.support.judge_server import JudgeServer, error_reply


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
    token = send_gate.set(gate)
    try:
        return await judge.acomplete(opinions_request())
    finally:
        send_gate.reset(token)


@both_http_paths
async def test_a_call_waiting_for_a_slot_asks_its_gate_when_it_gets_one_and_is_not_sent(server):
    server.latency_mean_s = 0.4
    judge = make_judge(server, max_concurrency=1)
    gate = Gate(allowed=True)
    first = asyncio.ensure_future(judge.acomplete(opinions_request()))
    await asyncio.sleep(0.1)
    waiting = asyncio.ensure_future(_gated(judge, gate))
    await asyncio.sleep(0.1)
    gate.allowed = False  # the pair was taken over while its call waited for the slot
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
