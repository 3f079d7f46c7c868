"""The bound on judge calls in flight, and an HTTP transport that holds it only on the wire.

:class:`CallSlots` is a counting semaphore shared by event loops
(:meth:`CallSlots.acquire_async`; :meth:`CallSlots.acquire` for a thread).
A freed slot is handed to the longest waiter at once, whichever thread or
loop it waits on: no polling, so a call waiting for a slot starts the moment
another ends.

:class:`WireSlotTransport` wraps an ``httpx`` async transport so a request
holds a slot from the moment it is sent until its response body is read or
closed, and nothing else. Why: litellm spends CPU building each request and
parsing its reply. Held around the whole litellm call, a
slot sits idle through both (docs/benchmark.md), and calls the run has ready
cannot use it. Around the wire alone, the judge sees ``size`` calls in
flight while the next ones are prepared beside them.

Before a request goes on the wire, once it holds its slot, the caller's send
gate is asked (:func:`judgeflow.judge.send_gate.may_send`); a refused request
is not sent (:class:`SendRefused`) and gives its slot to the next.

Imports httpx only (litellm's own dependency), never litellm.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import deque
from typing import Any, AsyncIterator

import httpx

from judgeflow.judge.send_gate import may_send

__all__ = ["CallSlots", "SendRefused", "WireSlotTransport", "wire_started"]


class SendRefused(httpx.TransportError):
    """The send gate refused a request: it never left the process."""


class CallSlots:
    """``size`` slots, first come first served across threads and event loops."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        self._lock = threading.Lock()
        self._free = size
        # each waiter: a threading.Event (a thread) or (loop, future) (a coroutine)
        self._waiters: deque[Any] = deque()

    def _take(self) -> bool:
        """A free slot, if one is free and nobody waits for it (the caller holds the lock)."""
        if self._free and not self._waiters:
            self._free -= 1
            return True
        return False

    def acquire(self, blocking: bool = True) -> bool:
        """A slot for this thread: waits for one, or with ``blocking=False``
        returns False at once when none is free."""
        with self._lock:
            if self._take():
                return True
            if not blocking:
                return False
            event = threading.Event()
            self._waiters.append(event)
        event.wait()
        return True

    async def acquire_async(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._take():
                return
            waiter = (loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter[1]
        except asyncio.CancelledError:
            with self._lock:
                try:
                    self._waiters.remove(waiter)
                    handed = False
                except ValueError:  # release() had already handed it the slot
                    handed = True
            if handed:
                self.release()
            raise

    def release(self) -> bool:
        """Give the slot back; True when it went to a coroutine waiting on the
        calling thread's own event loop (which the caller may yield to, so it
        goes on the wire at once)."""
        while True:
            with self._lock:
                if not self._waiters:
                    if self._free >= self.size:
                        raise ValueError("CallSlots released more often than acquired")
                    self._free += 1
                    return False
                waiter = self._waiters.popleft()
            if isinstance(waiter, threading.Event):
                waiter.set()
                return False
            loop, future = waiter
            if loop is _running_loop():
                _hand_over(future)  # its task is scheduled now, not after another turn of the loop
                return True
            try:
                loop.call_soon_threadsafe(_hand_over, future)
                return False
            except RuntimeError:  # its loop is closed: nobody will take it there
                continue


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _hand_over(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
    # a future cancelled meanwhile: its waiter saw it was no longer queued and released the slot


# The time.perf_counter() a call's request went on the wire, set by
# WireSlotTransport in the calling task's context: the judge's latency is the
# wire time, not the wait for a slot nor litellm's own work.
wire_started: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("wire_started", default=None)


class _SlotHeldStream(httpx.AsyncByteStream):
    """A response body that gives its slot back once read or closed."""

    def __init__(self, inner: httpx.AsyncByteStream, release) -> None:
        self._inner, self._release = inner, release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            handed = self._release()
        if handed:
            # the call that was waiting for this slot goes on the wire before
            # this reply is parsed and priced (litellm's CPU)
            await asyncio.sleep(0)


class WireSlotTransport(httpx.AsyncBaseTransport):
    """``inner`` with at most ``slots.size`` requests on the wire (see the module doc)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, slots: CallSlots) -> None:
        self._inner = inner
        self._slots = slots

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self._slots.acquire_async()
        if not await may_send():  # the caller's send gate, asked once the slot is held
            self._slots.release()
            raise SendRefused("the caller's send gate refused this request; it was not sent")
        released = False

        def release() -> bool:
            nonlocal released
            if released:
                return False
            released = True
            return self._slots.release()

        mark = wire_started.get()
        if mark is not None:
            mark.append(time.perf_counter())
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            release()
            raise
        return httpx.Response(
            status_code=response.status_code, headers=response.headers,
            stream=_SlotHeldStream(response.stream, release),  # type: ignore[arg-type]
            request=request, extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
