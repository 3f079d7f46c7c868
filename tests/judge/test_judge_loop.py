"""The judge loop: pairs run on it at once, their calls bounded by the judge's slots."""

from __future__ import annotations

import asyncio
import time

from judgeflow.metrics.hallucination.metric import HallucinationMetric
from judgeflow.metrics.toxicity.metric import ToxicityMetric
from judgeflow.judge.wire_slots import CallSlots
from judgeflow.judge.judge_loop import judge_loop
from tests.metrics.fakes import ScriptedJudge


def test_pairs_on_the_loop_share_the_judges_slots_in_their_priority_order():
    """Every pair submitted at once: what bounds them is the slots their calls take."""
    loop = judge_loop()
    assert judge_loop() is loop
    slots = CallSlots(4)
    running = peak = 0
    arrived: list[int] = []
    order: list[int] = []

    async def pair(i: int) -> int:
        nonlocal running, peak
        arrived.append(i)
        # as PairRun.priority gives it: odd pairs chain more calls
        await slots.acquire_async((-(i % 2), i))
        try:
            running += 1
            peak = max(peak, running)
            order.append(i)
            await asyncio.sleep(0.005)
            running -= 1
        finally:
            slots.release()
        return 1

    # The test holds every slot until all 30 pairs wait, so the order they get
    # them in is the slots' alone, not how far the loop got while they were
    # being submitted (a busy machine let early even pairs in first).
    for _ in range(4):
        assert slots.acquire(blocking=False)
    futures = [loop.submit(pair, i) for i in range(30)]
    deadline = time.monotonic() + 10
    while len(arrived) < 30 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(arrived) == 30
    for _ in range(4):
        slots.release()
    assert sum(f.result(timeout=10) for f in futures) == 30
    assert peak == 4
    odd = [i for i in range(30) if i % 2]
    even = [i for i in range(30) if not i % 2]
    assert order == odd + even


def test_toxicity_chains_more_judge_calls_than_hallucination():
    judge = ScriptedJudge({})
    assert ToxicityMetric(judge).judge_rounds == 3
    assert ToxicityMetric(judge, include_reason=False).judge_rounds == 2
    assert HallucinationMetric(judge).judge_rounds == 1


_TASK_LEFT_ON_THE_LOOP = """
import asyncio, logging
logging.basicConfig()
from judgeflow.judge.judge_loop import judge_loop

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
