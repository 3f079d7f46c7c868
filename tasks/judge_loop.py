"""The scoring process's event loop for judge calls, and its slots.

Every pair of every ``score-batch`` in flight is a coroutine on one loop, in
its own thread: one thread does all the HTTP work instead of
``max_concurrency`` threads taking turns at the GIL, a
retry's backoff holds no thread, and litellm keeps one HTTP client (it caches
clients per event loop).

At most ``max_concurrency`` pairs plus the judge's ``queue_ahead``
(:func:`judgeflow.judge.base.queue_ahead`) hold a slot at once, across every
batch; the judge itself keeps its calls in flight to ``max_concurrency`` and
holds the others prepared, so a call starts the moment another ends. A freed
slot goes to the waiting pair with the **longest chain of judge calls**
(toxicity: opinions, then verdicts, then reason; hallucination: one call)
across the run's batches, then to the **oldest batch**'s. Slots stay just as
busy, but the run's last calls are single ones: its tail is about one judge
call long instead of three (docs/benchmark.md).
"""

from __future__ import annotations

import asyncio
import atexit
import heapq
import itertools
import os
import threading
from concurrent.futures import Future
from typing import Any


class PrioritySlots:
    """``size`` slots for coroutines of one event loop; a freed slot goes to
    the waiter with the lowest ``priority`` (any comparable: tuples too), then
    the earliest."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self._free = size
        self._waiters: list[tuple[Any, int, asyncio.Future]] = []
        self._arrivals = itertools.count()

    async def acquire(self, priority: Any = 0) -> None:
        if self._free > 0:  # never with a live waiter: release hands a slot to one first
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._arrivals), waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot as it was cancelled: pass it on
                self.release()
            raise

    def release(self) -> None:
        while self._waiters:
            *_, waiter = heapq.heappop(self._waiters)
            if not waiter.done():  # a cancelled waiter is skipped
                waiter.set_result(None)
                return
        self._free += 1


class JudgeLoop:
    """The event loop (see the module doc), started on first use."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._slots: dict[int, PrioritySlots] = {}
        self._batches = itertools.count()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self.loop.run_forever, name="judgeflow-judge-loop", daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Cancel what is left on the loop and stop it. At exit: tasks others
        started on it and keep referenced (litellm's logging worker) would
        otherwise be collected pending, and asyncio logs "Task was destroyed
        but it is pending!" for each after the run's summary. A forked child
        holds a copy of the loop without its thread: nothing to stop there."""
        if os.getpid() != self._pid or not self._thread.is_alive():
            return

        async def cancel_the_rest() -> None:
            rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            if rest:
                await asyncio.wait(rest, timeout=timeout_s)

        try:
            asyncio.run_coroutine_threadsafe(cancel_the_rest(), self.loop).result(timeout=timeout_s + 1)
        except Exception:  # noqa: BLE001 - at exit, what cannot be cancelled is left to the OS
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=timeout_s)
        if not self._thread.is_alive():
            self.loop.close()

    async def bounded(self, size: int, coro_fn, *args, priority: Any = 0, **kwargs):
        """``coro_fn(*args, **kwargs)`` holding one of ``size`` slots."""
        slots = self._slots.get(size)
        if slots is None:
            slots = self._slots[size] = PrioritySlots(size)
        await slots.acquire(priority)
        try:
            return await coro_fn(*args, **kwargs)
        finally:
            slots.release()

    def next_batch(self) -> int:
        """A number for a new batch, higher than every earlier one's: the first
        part of its pairs' priority, so older batches go first."""
        return next(self._batches)

    def submit(self, coro_fn, *args, **kwargs) -> Future:
        """Run ``coro_fn(*args, **kwargs)`` on the loop (it takes its slot itself,
        with :meth:`bounded`). It runs in a copy of the caller's context, so its
        log lines belong to the calling task run."""
        return asyncio.run_coroutine_threadsafe(coro_fn(*args, **kwargs), self.loop)


_judge_loop: JudgeLoop | None = None
_judge_loop_lock = threading.Lock()


def judge_loop() -> JudgeLoop:
    global _judge_loop
    with _judge_loop_lock:
        if _judge_loop is None:
            _judge_loop = JudgeLoop()
        return _judge_loop
