"""The scoring process's event loop for judge calls.

Every pair of every ``score-batch`` in flight is a coroutine on one loop, in
its own thread: one thread does all the HTTP work instead of
``max_concurrency`` threads taking turns at the GIL, and a retry's backoff
holds no thread. A pair is not admitted by a limit here: how many pairs
exist is the run's window of batches (judgeflow/run/schedule.py), and their
judge calls wait for the judge's slots, in the pairs' priority order
(judgeflow/judge/wire_slots.py).

One loop per process, not one per run: litellm binds the HTTP clients it
caches and its logging worker to the event loop that first used them, so
runs of one process (``judgeflow serve``, a worker running several flow
runs) share this loop rather than each rebinding litellm to a loop of its own.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from concurrent.futures import Future


class JudgeLoop:
    """The event loop (see the module doc), started on first use."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
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

    def submit(self, coro_fn, *args, **kwargs) -> Future:
        """Run ``coro_fn(*args, **kwargs)`` on the loop. It runs in a copy of
        the caller's context, so its log lines belong to the calling task run."""
        return asyncio.run_coroutine_threadsafe(coro_fn(*args, **kwargs), self.loop)


# process-wide, as the module doc says why; created on first use
_judge_loop: JudgeLoop | None = None
_judge_loop_lock = threading.Lock()


def judge_loop() -> JudgeLoop:
    """This process's :class:`JudgeLoop`."""
    global _judge_loop
    with _judge_loop_lock:
        if _judge_loop is None:
            _judge_loop = JudgeLoop()
        return _judge_loop
