"""The scheduling of a scoring run: which claimed batches go to the judge, and when the run stops claiming.

:class:`RunSchedule` claims a batch, admits its pairs while the run's policy
(judgeflow/run/policy.py: its spend budget) lets them start, submits them
as one task and keeps at most ``window`` batches in
flight, folding each finished batch's outcomes into the run's totals, its
progress and its budget. It stops claiming at the first of: nothing left to
claim, the trace limit reached, the time budget's deadline or a stop request
(Ctrl-C), both asked of the run's policy (the same object its pairs' gates
are made from), the spend budget exhausted.
Task-level retries are the tasks' own.

It knows nothing of Prefect or the database: the flow hands it the functions
that claim a batch, submit one and wait for the first finished future
(flows/scoring.py), so its rules are tested on their own
(tests/run/test_schedule.py).
"""

from __future__ import annotations

import logging
import math
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from judgeflow.config.settings import Settings
from judgeflow.errors import ConfigError
from judgeflow.run.budget import Reservation
from judgeflow.run.policy import RunPolicy
from judgeflow.model import ClaimedBatch, Cursor, ScoreOutcome, TraceWork

# why a run stopped claiming
DONE = "done"  # nothing left to claim
LIMIT = "limit"  # the trace limit is reached
DEADLINE = "deadline"  # the time budget is spent (judgeflow/run/gate.py's TIME_SPENT.end)
STOPPED = "stopped"  # a stop was requested (judgeflow/run/gate.py's STOPPED.end)
BUDGET = "budget"  # the spend budget has no room for the next pair
ACCOUNT = "account"  # the account limit's Prefect API stopped answering (judgeflow/run/account.py)


# A batch's default size, per judge call allowed in flight (and its floor):
# enough ready judge calls to keep every slot busy while the oldest batch
# finishes its tail, in a few dozen Prefect task runs for thousands of traces
# (docs/benchmark.md).
PAIRS_PER_SLOT = 8
MIN_BATCH_SIZE = 100
# Hard ceiling on max_concurrency (pairs scored at once per process); only
# guards against a misconfigured parameter.
MAX_THREADS = 128
# batches in flight when the judge calls go through the batch API: each holds a
# task runner thread while its pairs wait on the provider
BATCH_WINDOW = MAX_THREADS // 2
BATCH_API_BATCH_SIZE = 1000  # pairs claimed per batch then (each pair is a coroutine waiting on a round)


def default_batch_size(max_concurrency: int) -> int:
    """The batch size a run uses unless given one: ``PAIRS_PER_SLOT`` pairs per
    judge call in flight, at least ``MIN_BATCH_SIZE``."""
    return max(MIN_BATCH_SIZE, PAIRS_PER_SLOT * max_concurrency)


def window_for(max_concurrency: int, batch_size: int) -> int:
    """Batches in flight at most: enough pairs to keep every judge slot busy
    while the oldest batch finishes its tail, plus one so a batch held up by a
    slow pair (a retry, a stall) does not starve the others."""
    return 2 + math.ceil(max_concurrency / batch_size)


def checked_batch_size(settings: Settings, sample_rate: float, batch_size: int | None) -> int:
    """The run's batch size (unset: :func:`default_batch_size`, or through
    the batch API, where a claim costs no wire slot, large batches in few task
    runs), once the run's arguments are known to be usable."""
    if not 0.0 < sample_rate <= 1.0:
        raise ConfigError("sample_rate must be in (0, 1]")
    if settings.max_concurrency > MAX_THREADS:
        raise ConfigError(f"max_concurrency may be at most {MAX_THREADS}")
    if batch_size is None:
        batch_size = BATCH_API_BATCH_SIZE if settings.judge_batch else default_batch_size(settings.max_concurrency)
    if batch_size < 1:
        raise ConfigError("batch_size must be at least 1")
    return batch_size


class Future(Protocol):
    def result(self) -> Any: ...

    def cancel(self) -> bool: ...


@dataclass(frozen=True)
class Bounds:
    """What bounds a run's claiming: ``batch_size`` pairs per claim, ``window``
    batches in flight, ``limit`` traces (None: all) of ``metrics`` metrics
    each (the time budget is the run's policy's)."""

    batch_size: int
    window: int
    limit: int | None
    metrics: int


def bounds_for(settings: Settings, batch_size: int, limit: int | None, metrics: int) -> "Bounds":
    """A run's :class:`Bounds`: through the batch API every pair claimed joins
    the rounds at once (a round costs a few HTTP calls), so the window is wide."""
    window = BATCH_WINDOW if settings.judge_batch else window_for(settings.max_concurrency, batch_size)
    return Bounds(batch_size=batch_size, window=window, limit=limit, metrics=metrics)


class NightTraces(Protocol):
    """A sharded night's trace limit, shared by its children (judgeflow/db/night_ledger.py)."""

    def taken(self) -> int:
        """Traces the night has taken, every child's."""

    def take(self, trace_ids: list[str], limit: int) -> set[str]:
        """Of ``trace_ids``, those the night took already and new ones up to ``limit`` for the night."""


class RunSchedule:
    """One run's scheduling (see the module doc). ``claim(room, cursor)``
    returns the next :class:`ClaimedBatch`; ``submit(items, claimed_at)``
    starts a task scoring them and returns its future; ``first_done(futures)``
    waits for one of them to finish and returns it; ``cancel(future)`` cancels
    a future whose task has not started. ``totals.add(outcomes)`` and
    ``progress.advance(outcomes, batch=n)`` / ``progress.show()`` receive what
    finishes. ``policy`` is the run's (its time budget, its stop request, its
    spend budget); ``clock`` stamps each batch's claim time. ``night``: in a
    sharded night, the trace limit counts the whole night's traces (every
    child's), not this run's."""

    def __init__(
        self, *, submit: Callable[[list[TraceWork], float], Future], first_done: Callable[[list[Future]], Future],
        cancel: Callable[[Future], Any], bounds: Bounds, policy: RunPolicy, totals: Any, progress: Any,
        log: logging.Logger | logging.LoggerAdapter | None = None, clock: Callable[[], float] = time.time,
        night: NightTraces | None = None,
    ) -> None:
        self._submit, self._first_done, self._cancel = submit, first_done, cancel
        self._night = night
        self.bounds = bounds
        self.policy = policy
        self.budget = policy.budget
        self._totals, self._progress = totals, progress
        self._log = log or logging.getLogger("judgeflow.schedule")
        self._clock = clock
        self.running: list[Future] = []
        self._reservations: dict[int, Reservation] = {}  # id(future) -> what it holds against the budget
        self._traces_seen: set[str] = set()  # only kept for a trace limit
        self._cursor: Cursor | None = None
        # the claim being admitted: (claimed at, its pairs admitted and not submitted yet, what they hold)
        self._open: tuple[float, list[TraceWork], Reservation] | None = None
        self.batches = 0
        self.ended: str | None = None

    # --- claiming ---------------------------------------------------------

    def run(self, claim: Callable[[int, Cursor | None], ClaimedBatch]) -> str:
        """Claim and submit batches until one of the ends of the module doc;
        returns which. Work still in flight is left to :meth:`finish`."""
        while self.ended is None:
            self.ended = self._why_not_claim()
            if self.ended is not None:
                break
            batch = claim(self._room(), self._cursor)
            claimed_at = self._clock()
            if batch.cursor is None:
                self.ended = DONE
                break
            self._cursor = batch.cursor
            self.batches += 1
            self._admit(self._within_limit(batch.items), claimed_at)
            if self.budget is not None and self.budget.exhausted:
                self.ended = BUDGET
                self._log.warning(
                    "run budget $%.4f reached (spent $%.4f, in flight ~$%.4f): no more claims; "
                    "finishing the work in flight, the rest stays pending",
                    self.budget.limit_usd, self.budget.spent_usd, self.budget.in_flight_usd,
                )
                break
            while len(self.running) >= self.bounds.window:
                self._collect()
        return self.ended

    def again(self) -> None:
        """Claim from the start once more (a sample's top-up selected more of
        the night after the run claimed all there was): the next :meth:`run`
        reads every phase again; what was done or is claimed drops out."""
        self.ended, self._cursor = None, None

    def _why_not_claim(self) -> str | None:
        refusal = self.policy.why_not_claim()
        if refusal is not None and refusal.end == STOPPED:
            self._log.warning("stop requested (Ctrl-C): no more claims; judge calls in flight finish and are "
                              "stored, pairs not started are given back for the next run")
        if refusal is not None:
            return refusal.end
        if self._room() <= 0:
            return LIMIT
        return None

    def _room(self) -> int:
        """Pairs the next claim may take: a batch, or what the trace limit leaves."""
        room = self.bounds.batch_size
        if self.bounds.limit is not None:
            # a trace counts once however many of its metrics are pending
            seen = len(self._traces_seen) if self._night is None else self._night.taken()
            room = min(room, (self.bounds.limit - seen) * self.bounds.metrics)
        return room

    def _within_limit(self, items: list[TraceWork]) -> list[TraceWork]:
        """The batch's pairs of traces already seen, and of new traces (oldest
        first, the batch's order) up to the trace limit."""
        if self.bounds.limit is None:
            return items
        new = [t for t in dict.fromkeys(w.trace_id for w in items) if t not in self._traces_seen]
        if self._night is not None:  # the night's traces: taken by a sibling, or new within the night's limit
            allowed = self._night.take(new, self.bounds.limit)
        else:
            allowed = set(new[: self.bounds.limit - len(self._traces_seen)])
        kept = [w for w in items if w.trace_id in allowed or w.trace_id in self._traces_seen]
        self._traces_seen.update(w.trace_id for w in kept)
        return kept

    def _admit(self, items: list[TraceWork], claimed_at: float) -> None:
        """Submit the pairs the policy lets start. A pair that does not fit
        waits for work in flight (whose estimates become real costs), and the
        pairs of this claim admitted before it are submitted first and count
        as work in flight (:meth:`_finish_one`): a claim is cut only where
        billed + in flight + the next pair's estimate passes the budget with
        nothing left to wait for, whatever the batch size. Pairs refused keep
        their claims until the run ends, when the lease keeper releases every
        claim the run still holds: they stay pending."""
        self._open = (claimed_at, [], Reservation())
        for work in items:
            # the open reservation object stays this claim's, emptied when its pairs are submitted
            if not self.policy.admit(work, self._open[2], self._finish_one):
                break
            self._open[1].append(work)
        self._submit_open()
        self._open = None

    def _submit_open(self) -> None:
        """Submit the pairs of the current claim admitted so far, with what they hold against the budget."""
        if self._open is None or not self._open[1]:
            return
        claimed_at, admitted, reservation = self._open
        held = Reservation(dict(reservation.pairs))
        reservation.pairs.clear()
        future = self._submit(list(admitted), claimed_at)
        admitted.clear()
        self.running.append(future)
        self._reservations[id(future)] = held
        self._progress.show()

    def _finish_one(self) -> bool:
        """Wait for one batch in flight and count it (the current claim's
        admitted pairs are submitted first, so they can be waited on); False
        when nothing is in flight."""
        self._submit_open()
        if not self.running:
            return False
        self._collect()
        return True

    # --- work in flight ---------------------------------------------------

    def _collect(self) -> list[ScoreOutcome]:
        """Wait for the first batch in flight to finish and count its outcomes."""
        done = self._first_done(list(self.running))
        self.running.remove(done)
        reservation = self._reservations.pop(id(done), None)
        result = done.result()
        outcomes = result if isinstance(result, list) else [result]
        self._totals.add(outcomes)
        self._progress.advance(outcomes, batch=self.batches)
        if self.budget is not None and reservation is not None:
            self.budget.close(reservation, outcomes)
        return outcomes

    def finish(self) -> None:
        """Wait for every batch in flight and count it."""
        while self.running:
            self._collect()

    def drain(self) -> None:
        """:meth:`finish` for a run that is already failing: a batch that
        fails too is logged, the others are still counted."""
        while self.running:
            try:
                self._collect()
            except Exception as error:  # already failing: finish the rest, keep the first error
                self._log.warning("a task in flight failed too: %s", error)

    def cancel_and_wait(self) -> None:
        """Cancel the submitted tasks that have not started and wait for the
        rest, without counting them: afterwards nothing judges or writes under
        the run's claims."""
        for future in self.running:
            self._cancel(future)  # only succeeds for a task still queued
        for future in self.running:
            try:
                future.result()
            except (Exception, CancelledError):  # cancelled, or failed: either way it no longer runs
                pass
