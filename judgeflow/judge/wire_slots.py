"""The one bound on judge calls in flight, and an HTTP transport that holds it only on the wire.

:class:`CallSlots` is a counting semaphore shared by event loops
(:meth:`CallSlots.acquire_async`; :meth:`CallSlots.acquire` for a thread).
A freed slot is handed at once, whichever thread or loop it waits on (no
polling), to the waiter with the lowest **priority**, then the longest
waiter. A caller's priority is the :class:`~judgeflow.judge.send_gate.Call`'s
it hands the judge: the run gives each pair's calls one (tasks/scoring.py: the
pair with the longest chain of judge calls first, then the oldest batch, then
the pair started first), so every call the pair makes, and every retry, waits
in that order wherever it waits. Which slots a call takes:

* a judge in the run's process: one :class:`CallSlots` of ``max_concurrency``,
  held by each attempt while it is on the wire (:class:`WireSlotTransport`);
* judge worker processes (judgeflow/judge/pool/process_pool.py): each worker's judge
  holds its share of ``max_concurrency`` (:meth:`judgeflow.judge.config.JudgeConfig.shares`,
  the one split) the same way, and the run holds one :class:`CallSlots` per
  pool for the calls it has handed to the workers: their shares plus the
  few each holds prepared (:meth:`~judgeflow.judge.config.JudgeConfig.dispatch_bound`,
  derived from the shares). It is the same bound seen from the run: a
  worker's slots are in another process, and the run must decide before a
  call leaves it whether it may still go (its send gate) and which waiting
  call goes first; without it, every call of the run's batches would be
  handed to the workers at once, past the gate, out of order.

Nothing else bounds the run's judge calls: a pair is not admitted by a limit
of its own; its calls wait here.

:class:`WireSlotTransport` wraps an ``httpx`` async transport so a request
holds a slot from the moment it is sent until its response body is read or
closed, and nothing else. Why: litellm spends CPU building each request and
parsing its reply. Held around the whole litellm call, a
slot sits idle through both (docs/benchmark.md), and calls the run has ready
cannot use it. Around the wire alone, the judge sees ``size`` calls in
flight while the next ones are prepared beside them.

Before a request goes on the wire, once it holds its slot, the call's send
gate is asked (:meth:`judgeflow.judge.send_gate.Call.may_send`); a refused
request is not sent (:class:`SendRefused`) and gives its slot to the next.
The transport learns which call a request belongs to from the attempt's
:class:`Ticket` (:func:`attempt_ticket`): litellm takes one HTTP client for
every request and has no way to hand a per-request object down to it.

Imports httpx only (litellm's own dependency), never litellm.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import threading
import time
from contextlib import contextmanager
from typing import Any, AsyncIterator, Iterator

import httpx

from judgeflow.judge.send_gate import ANY_CALL, Call

__all__ = ["CallSlots", "SendRefused", "Ticket", "WireSlotTransport", "attempt_ticket"]


class SendRefused(httpx.TransportError):
    """The send gate refused a request: it never left the process."""


class _Waiter:
    """One waiter: a thread's event, or a coroutine's (loop, future)."""

    __slots__ = ("key", "wake", "gone")

    def __init__(self, key: tuple, wake: Any) -> None:
        self.key, self.wake, self.gone = key, wake, False

    def __lt__(self, other: "_Waiter") -> bool:
        return self.key < other.key


class CallSlots:
    """``size`` slots across threads and event loops, handed out by priority
    (lower first; the empty tuple before every other), then first come first served."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        self._lock = threading.Lock()
        self._free = size
        self._waiters: list[_Waiter] = []  # a heap; a cancelled waiter stays in it, marked gone
        self._waiting = 0  # waiters not gone
        self._arrivals = itertools.count()

    def _take(self) -> bool:
        """A free slot, if one is free and nobody waits for it (the caller holds the lock)."""
        if self._free and not self._waiting:
            self._free -= 1
            return True
        return False

    def _queue(self, priority: tuple, wake: Any) -> _Waiter:
        """Queue a waiter (the caller holds the lock)."""
        key = (priority, next(self._arrivals))
        waiter = _Waiter(key, wake)
        heapq.heappush(self._waiters, waiter)
        self._waiting += 1
        return waiter

    def acquire(self, blocking: bool = True, priority: tuple = ()) -> bool:
        """A slot for this thread: waits for one, or with ``blocking=False``
        returns False at once when none is free."""
        with self._lock:
            if self._take():
                return True
            if not blocking:
                return False
            event = threading.Event()
            self._queue(priority, event)
        event.wait()
        return True

    async def acquire_async(self, priority: tuple = ()) -> None:
        """A slot for this coroutine, in the order of ``priority``."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._take():
                return
            future = loop.create_future()
            waiter = self._queue(priority, (loop, future))
        try:
            await future
        except asyncio.CancelledError:
            with self._lock:
                handed = waiter.gone  # release() took it off the queue: the slot is this waiter's
                if not handed:
                    waiter.gone = True
                    self._waiting -= 1
            if handed:
                self.release()
            raise

    def _next_waiter(self) -> _Waiter | None:
        """The first waiter not gone, taken off the queue (the caller holds the lock)."""
        while self._waiters:
            waiter = heapq.heappop(self._waiters)
            if not waiter.gone:
                waiter.gone = True
                self._waiting -= 1
                return waiter
        return None

    def release(self) -> bool:
        """Give the slot back; True when it went to a coroutine waiting on the
        calling thread's own event loop (which the caller may yield to, so it
        goes on the wire at once)."""
        while True:
            with self._lock:
                waiter = self._next_waiter()
                if waiter is None:
                    if self._free >= self.size:
                        raise ValueError("CallSlots released more often than acquired")
                    self._free += 1
                    return False
            if isinstance(waiter.wake, threading.Event):
                waiter.wake.set()
                return False
            loop, future = waiter.wake
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


class Ticket:
    """One attempt of a call, as its HTTP request sees it: the ``call`` (its
    gate and priority), the ``time.perf_counter()`` marks at which a request
    of it went on the wire (the judge's latency is the wire time, not the wait
    for a slot nor litellm's own work; none: it never got that far), and
    whether the gate ``refused`` it."""

    __slots__ = ("call", "marks", "refused")

    def __init__(self, call: Call) -> None:
        self.call = call
        self.marks: list[float] = []
        self.refused = False


# The attempt the current task is making, for the HTTP transport under
# litellm: litellm builds the request from one shared client and passes
# nothing of the caller's down to it, so this is the only way the call's gate
# and priority reach the wire. Set by the judge around one attempt only.
_ticket: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar("judgeflow_attempt", default=None)


@contextmanager
def attempt_ticket(call: Call) -> Iterator[Ticket]:
    """Around one attempt of ``call``: its :class:`Ticket`, seen by
    :class:`WireSlotTransport` under it."""
    ticket = Ticket(call)
    token = _ticket.set(ticket)
    try:
        yield ticket
    finally:
        _ticket.reset(token)


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
        ticket = _ticket.get()
        call = ANY_CALL if ticket is None else ticket.call
        await self._slots.acquire_async(call.priority)
        if not await call.may_send():  # the call's send gate, asked once the slot is held
            self._slots.release()
            if ticket is not None:
                ticket.refused = True
            raise SendRefused("the caller's send gate refused this request; it was not sent")
        released = False

        def release() -> bool:
            nonlocal released
            if released:
                return False
            released = True
            return self._slots.release()

        if ticket is not None:
            ticket.marks.append(time.perf_counter())
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
