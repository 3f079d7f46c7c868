"""Whether a judge call may still be sent: asked before every attempt.

A run holds its pairs by a lock or a lease. Frozen or starved past its lease,
it may lose them to another run, and a call it prepared before (waiting for a
slot on the wire, or a retry waiting out its backoff) would pay for a pair
that is no longer its own. So the task judging a pair sets a :class:`SendGate`
in :data:`send_gate` around the pair's coroutine, and the judge awaits
:func:`may_send` before each attempt it sends (every call, every retry),
once it holds its slot on the wire. An attempt the gate refuses is not sent
and not billed: the judge raises :class:`~judgeflow.errors.CallWithheld`.

Cheap while the claims are fresh: :meth:`SendGate.fresh_until` is a
``time.monotonic()`` (system-wide, so a judge worker process compares it too)
up to which the run's claims need no check; only past it is
:meth:`SendGate.confirm` asked (which may ask the database).

Knows nothing of leases or databases: the gate is handed in.
"""

from __future__ import annotations

import contextvars
import math
import time
from contextlib import contextmanager
from typing import Iterator, Protocol


class SendGate(Protocol):
    def fresh_until(self) -> float:
        """The ``time.monotonic()`` until which a call may be sent unchecked."""

    async def confirm(self) -> bool:
        """Whether the call may be sent now (asked past :meth:`fresh_until`).
        A confirmation should move :meth:`fresh_until` on for as long as it
        holds: a call handed to a judge worker goes with that time alone."""


send_gate: contextvars.ContextVar[SendGate | None] = contextvars.ContextVar("send_gate", default=None)
# per attempt: set by the judge around one attempt, noted by may_send when it refuses
_refusals: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("send_refusals", default=None)


def fresh_until() -> float:
    """The current gate's :meth:`SendGate.fresh_until` (no gate: never stale)."""
    gate = send_gate.get()
    return math.inf if gate is None else gate.fresh_until()


async def may_send() -> bool:
    """Whether the attempt about to be sent may go (see the module doc); a
    refusal is noted for :func:`watched_attempt`."""
    gate = send_gate.get()
    if gate is None or time.monotonic() < gate.fresh_until() or await gate.confirm():
        return True
    refusals = _refusals.get()
    if refusals is not None:
        refusals.append(True)
    return False


@contextmanager
def watched_attempt() -> Iterator[list[bool]]:
    """Around one attempt: a list that is non-empty once :func:`may_send`
    refused it (wherever it was asked: the judge itself or its HTTP transport)."""
    refusals: list[bool] = []
    token = _refusals.set(refusals)
    try:
        yield refusals
    finally:
        _refusals.reset(token)


class FreshUntil:
    """The gate of a call that left the run's process (a judge worker): sent
    unchecked until the claims' ``until`` it came with; past it, refused, and
    the call goes back to the run, which asks its own gate."""

    def __init__(self, until: float) -> None:
        self._until = until

    def fresh_until(self) -> float:
        return self._until

    async def confirm(self) -> bool:
        return False
