"""The judge loop's slots: the bound, and who gets a freed slot."""

from __future__ import annotations

import asyncio

import pytest

from judgeflow.metrics.hallucination.metric import HallucinationMetric
from judgeflow.metrics.toxicity.metric import ToxicityMetric
from judgeflow.tasks.judge_loop import PrioritySlots, judge_loop
from tests.metrics.fakes import ScriptedJudge


async def test_a_freed_slot_goes_to_the_lowest_priority_then_the_earliest():
    slots = PrioritySlots(1)
    await slots.acquire()
    order: list[str] = []

    async def wait(name: str, priority: int) -> None:
        await slots.acquire(priority)
        order.append(name)
        slots.release()

    waiters = []
    for name, priority in [("single-1", -1), ("chain-1", -3), ("single-2", -1), ("chain-2", -3), ("middle", -2)]:
        waiters.append(asyncio.create_task(wait(name, priority)))
        await asyncio.sleep(0)  # queued in this order
    slots.release()
    await asyncio.gather(*waiters)

    assert order == ["chain-1", "chain-2", "middle", "single-1", "single-2"]


async def test_never_more_holders_than_slots_and_every_waiter_served():
    slots = PrioritySlots(3)
    holding = peak = 0

    async def hold(priority: int) -> None:
        nonlocal holding, peak
        await slots.acquire(priority)
        holding += 1
        peak = max(peak, holding)
        await asyncio.sleep(0.001 * (priority % 3))
        holding -= 1
        slots.release()

    await asyncio.gather(*(hold(-(i % 4)) for i in range(40)))

    assert peak == 3
    await asyncio.wait_for(slots.acquire(), 1)  # all three free again
    await asyncio.wait_for(slots.acquire(), 1)
    await asyncio.wait_for(slots.acquire(), 1)


async def test_a_cancelled_waiter_neither_takes_nor_loses_a_slot():
    slots = PrioritySlots(1)
    await slots.acquire()
    cancelled = asyncio.create_task(slots.acquire(-5))
    later = asyncio.create_task(slots.acquire(0))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    slots.release()  # skips the cancelled waiter
    await asyncio.wait_for(later, 1)

    # handed the slot in the same step it was cancelled: it passes the slot on
    handed = asyncio.create_task(slots.acquire())
    after = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()
    handed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handed
    await asyncio.wait_for(after, 1)


def test_the_loop_runs_submitted_pairs_within_the_bound():
    loop = judge_loop()
    assert judge_loop() is loop
    running = peak = 0

    async def pair() -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.005)
        running -= 1
        return 1

    futures = [loop.submit(loop.bounded, 4, pair, priority=-(i % 2)) for i in range(30)]
    assert sum(f.result(timeout=10) for f in futures) == 30
    assert peak == 4


def test_toxicity_chains_more_judge_calls_than_hallucination():
    judge = ScriptedJudge({})
    assert ToxicityMetric(judge).judge_rounds == 3
    assert ToxicityMetric(judge, include_reason=False).judge_rounds == 2
    assert HallucinationMetric(judge).judge_rounds == 1


_TASK_LEFT_ON_THE_LOOP = """
import asyncio, logging
logging.basicConfig()
from judgeflow.tasks.judge_loop import judge_loop

held = []

async def start() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()
    held.append(asyncio.create_task(forever()))  # kept, as litellm's logging worker keeps its task

judge_loop().submit(start).result(timeout=10)
print("exiting", flush=True)
"""


def test_a_task_left_on_the_loop_is_cancelled_at_exit_without_noise():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _TASK_LEFT_ON_THE_LOOP], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "exiting" in done.stdout, done.stdout + done.stderr
    assert "Task was destroyed but it is pending" not in done.stderr, done.stderr
    assert done.stderr == "", done.stderr
