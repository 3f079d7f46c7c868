"""CallSlots and WireSlotTransport, without a network (the transport's inner side is httpx's MockTransport)."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from judgeflow.judge.send_gate import Call
from judgeflow.judge.wire_slots import CallSlots, WireSlotTransport, attempt_ticket


def test_non_blocking_acquire_and_over_release():
    slots = CallSlots(2)
    assert slots.acquire(blocking=False) and slots.acquire(blocking=False)
    assert slots.acquire(blocking=False) is False
    slots.release()
    slots.release()
    with pytest.raises(ValueError):
        slots.release()
    with pytest.raises(ValueError):
        CallSlots(0)


async def test_a_freed_slot_goes_to_the_longest_waiter_thread_or_coroutine():
    slots = CallSlots(1)
    slots.acquire()
    order: list[str] = []

    def thread_waiter() -> None:
        slots.acquire()
        order.append("thread")
        slots.release()

    thread = threading.Thread(target=thread_waiter)
    thread.start()
    while not slots._waiters:  # the thread waits first
        await asyncio.sleep(0.001)

    async def coroutine_waiter() -> None:
        await slots.acquire_async()
        order.append("coroutine")
        slots.release()

    waiting = asyncio.create_task(coroutine_waiter())
    await asyncio.sleep(0.01)
    assert order == []
    slots.release()
    await asyncio.wait_for(waiting, 5)
    thread.join(5)
    assert order == ["thread", "coroutine"]
    assert slots.acquire(blocking=False)  # every slot came back


async def test_a_freed_slot_goes_to_the_lowest_priority_then_the_earliest():
    slots = CallSlots(1)
    await slots.acquire_async()
    order: list[str] = []

    async def wait(name: str, priority: tuple) -> None:
        await slots.acquire_async(priority)
        order.append(name)
        slots.release()

    waiters = []
    for name, priority in [("single-1", (-1,)), ("chain-1", (-3,)), ("single-2", (-1,)), ("chain-2", (-3,)),
                           ("middle", (-2,))]:
        waiters.append(asyncio.create_task(wait(name, priority)))
        await asyncio.sleep(0)  # queued in this order
    thread = threading.Thread(target=slots.acquire, kwargs={"priority": (-4,)})
    thread.start()
    while slots._waiting < 6:  # the thread is queued too
        await asyncio.sleep(0.001)
    slots.release()
    thread.join(5)
    assert order == [] and not thread.is_alive()  # the thread's priority was lowest: it holds the slot
    slots.release()
    await asyncio.gather(*waiters)

    assert order == ["chain-1", "chain-2", "middle", "single-1", "single-2"]


async def test_a_cancelled_waiter_neither_takes_nor_loses_a_slot_whatever_its_priority():
    slots = CallSlots(1)
    await slots.acquire_async()
    cancelled = asyncio.create_task(slots.acquire_async((-5,)))
    later = asyncio.create_task(slots.acquire_async((0,)))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    slots.release()  # skips the cancelled waiter
    await asyncio.wait_for(later, 1)

    # handed the slot in the same step it was cancelled: it passes the slot on
    handed = asyncio.create_task(slots.acquire_async((-1,)))
    after = asyncio.create_task(slots.acquire_async((0,)))
    await asyncio.sleep(0)
    slots.release()
    handed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handed
    await asyncio.wait_for(after, 1)
    assert not slots.acquire(blocking=False)  # ``after`` holds the only slot
    slots.release()
    assert slots.acquire(blocking=False)


async def test_a_waiter_is_woken_without_polling():
    slots = CallSlots(1)
    await slots.acquire_async()
    waiting = asyncio.create_task(slots.acquire_async())
    await asyncio.sleep(0.2)  # a polling waiter would be sleeping 50 ms at a time by now
    released = time.perf_counter()
    slots.release()
    await waiting
    assert time.perf_counter() - released < 0.02


async def test_a_cancelled_waiter_gives_back_a_slot_it_was_handed():
    slots = CallSlots(1)
    await slots.acquire_async()
    handed = asyncio.create_task(slots.acquire_async())
    queued = asyncio.create_task(slots.acquire_async())
    await asyncio.sleep(0.01)
    slots.release()  # handed to the first waiter, which is cancelled before it runs
    handed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handed
    await asyncio.wait_for(queued, 5)  # ... so the slot went on to the next
    slots.release()
    never_handed = asyncio.create_task(slots.acquire_async())
    await asyncio.sleep(0)
    assert never_handed.done()
    slots.release()
    assert slots.acquire(blocking=False) and slots.acquire(blocking=False) is False


async def test_at_most_size_holders_at_once_across_threads_and_a_loop():
    slots = CallSlots(3)
    holders = peak = 0
    lock = threading.Lock()

    def hold() -> None:
        nonlocal holders, peak
        with lock:
            holders += 1
            peak = max(peak, holders)
        time.sleep(0.002)
        with lock:
            holders -= 1

    def in_thread() -> None:
        for _ in range(20):
            slots.acquire()
            hold()
            slots.release()

    async def in_loop() -> None:
        for _ in range(20):
            await slots.acquire_async()
            hold()
            await asyncio.sleep(0.001)
            slots.release()

    threads = [threading.Thread(target=in_thread) for _ in range(4)]
    for thread in threads:
        thread.start()
    await asyncio.gather(*(in_loop() for _ in range(4)))
    for thread in threads:
        thread.join(10)
    assert peak == 3


class _Body(httpx.AsyncByteStream):
    def __init__(self) -> None:
        self.closed = False

    async def __aiter__(self):
        yield b'{"ok": true}'

    async def aclose(self) -> None:
        self.closed = True


async def test_the_transport_holds_a_slot_from_send_until_the_body_is_closed():
    slots = CallSlots(1)
    bodies: list[_Body] = []

    def reply(request: httpx.Request) -> httpx.Response:
        bodies.append(_Body())
        return httpx.Response(200, stream=bodies[-1])

    transport = WireSlotTransport(httpx.MockTransport(reply), slots)
    with attempt_ticket(Call()) as ticket:
        response = await transport.handle_async_request(httpx.Request("POST", "http://judge.test/"))
    assert len(ticket.marks) == 1 and not ticket.refused  # the send time, for the judge's latency
    assert slots.acquire(blocking=False) is False  # the reply has not been read yet
    assert await response.aread() == b'{"ok": true}'
    await response.aclose()
    assert bodies[0].closed
    assert slots.acquire(blocking=False)  # read and closed: the slot is free
    slots.release()


async def test_the_transport_gives_the_slot_back_when_the_request_fails():
    slots = CallSlots(1)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = WireSlotTransport(httpx.MockTransport(refuse), slots)
    for _ in range(3):  # with a slot leaked, the second attempt would wait for ever
        with pytest.raises(httpx.ConnectError):
            await asyncio.wait_for(transport.handle_async_request(httpx.Request("POST", "http://judge.test/")), 5)
    assert slots.acquire(blocking=False)


async def test_through_an_httpx_client_the_slot_is_free_once_the_call_returns():
    slots = CallSlots(2)
    async with httpx.AsyncClient(transport=WireSlotTransport(
            httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True})), slots)) as client:
        replies = await asyncio.gather(*(client.post("http://judge.test/") for _ in range(6)))
    assert [r.json() for r in replies] == [{"ok": True}] * 6
    assert slots.acquire(blocking=False) and slots.acquire(blocking=False)


class _Refusing:
    """A send gate never fresh that refuses."""

    def __init__(self) -> None:
        self.asked = 0

    def fresh_until(self) -> float:
        return float("-inf")

    async def confirm(self) -> bool:
        self.asked += 1
        return False


async def test_the_transport_asks_the_attempts_gate_and_sends_nothing_it_refuses():
    slots = CallSlots(1)
    sent: list[httpx.Request] = []

    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"ok": True})

    transport = WireSlotTransport(httpx.MockTransport(reply), slots)
    gate = _Refusing()
    with attempt_ticket(Call(gate, (1,))) as ticket:
        with pytest.raises(httpx.TransportError):
            await transport.handle_async_request(httpx.Request("POST", "http://judge.test/"))
    assert ticket.refused and ticket.marks == [] and gate.asked == 1 and sent == []
    assert slots.acquire(blocking=False)  # the refused request gave its slot back
