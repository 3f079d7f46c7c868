"""Whether a judge call may still be sent: asked before every attempt, once it holds its slot.

A run holds its pairs by a lock or a lease. Frozen or starved past its lease,
it may lose them to another run, and a call it prepared before (waiting for a
slot on the wire, or a retry waiting out its backoff) would pay for a pair
that is no longer its own; and a pair not started yet may no longer start
(a stop, the time or spend budget). So every call goes with a :class:`Call`:
its pair's :class:`SendGate` and its place among the calls waiting for a slot.
The caller hands it to the judge explicitly (``judge.acomplete(request,
call=...)``, or through a :class:`~judgeflow.judge.base.BoundJudge`), and the
judge asks :meth:`Call.may_send` before each attempt it sends (every call,
every retry), once it holds its slot on the wire. An attempt the gate refuses
is not sent and not billed: the judge raises
:class:`~judgeflow.errors.CallWithheld`.

Cheap while the claims are fresh: :meth:`SendGate.fresh_until` is a
``time.monotonic()`` (system-wide, so a judge worker process compares it too)
up to which a call may go unchecked; only past it is :meth:`SendGate.confirm`
asked (which may ask the database).

Knows nothing of runs, leases or databases: the gate is handed in
(judgeflow/run/gate.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol


class RequestPermits(Protocol):
    """An account's rate limit as the judge sees it, handed to it by the caller
    with the call's gate (a gate's ``permits``; judgeflow/run/account.py builds
    it): asked before every attempt sent, retries included, in the run's process."""

    async def take(self, tokens: int) -> None:
        """Wait until a request of about ``tokens`` tokens may go."""

    def used(self, estimated: int, tokens: int) -> None:
        """A reply reported ``tokens`` for a request taken at ``estimated``."""

    async def refused(self, retry_after_s: float | None) -> None:
        """The provider refused a request with a 429: every process of the account waits."""


class SendGate(Protocol):
    def fresh_until(self) -> float:
        """The ``time.monotonic()`` until which a call may be sent unchecked."""

    async def confirm(self) -> bool:
        """Whether the call may be sent now (asked past :meth:`fresh_until`).
        A confirmation should move :meth:`fresh_until` on for as long as it
        holds: a call handed to a judge worker goes with that time alone."""


@dataclass(frozen=True)
class Call:
    """What goes with every attempt of a judge call: its ``gate`` (None:
    always sent) and its ``priority`` among the calls waiting for a slot
    (lower goes first; judgeflow/judge/wire_slots.py)."""

    gate: SendGate | None = None
    priority: tuple = ()

    @property
    def permits(self) -> RequestPermits | None:
        """The account's request permits the gate hands its attempts (a gate's
        optional ``permits``; None: no account limit)."""
        return getattr(self.gate, "permits", None)

    def fresh_until(self) -> float:
        """The gate's :meth:`SendGate.fresh_until` (no gate: never stale)."""
        return math.inf if self.gate is None else self.gate.fresh_until()

    async def may_send(self) -> bool:
        """Whether the attempt about to be sent may go (see the module doc)."""
        gate = self.gate
        return gate is None or time.monotonic() < gate.fresh_until() or await gate.confirm()


ANY_CALL = Call()  # a call of nobody's pair: sent unchecked, before any call with a priority


class FreshUntil:
    """The gate of a call that left the run's process (a judge worker): sent
    unchecked until the claims' ``until`` it came with; past it, refused, and
    the attempt goes back to the run, which asks its own gate."""

    def __init__(self, until: float) -> None:
        self._until = until

    def fresh_until(self) -> float:
        return self._until

    async def confirm(self) -> bool:
        return False
