"""The judge loop: pairs run on it at once, their calls bounded by the judge's slots."""

from __future__ import annotations

import asyncio

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
    order: list[int] = []

    async def pair(i: int) -> int:
        nonlocal running, peak
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

    futures = [loop.submit(pair, i) for i in range(30)]
    assert sum(f.result(timeout=10) for f in futures) == 30
    assert peak == 4
    waited = order[4:]  # the first four found a free slot; the others waited for one
    assert [i for i in waited if i % 2] == sorted(i for i in waited if i % 2)
    assert max(waited.index(i) for i in waited if i % 2) < min(waited.index(i) for i in waited if i % 2 == 0)


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
