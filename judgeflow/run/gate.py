"""One gate per pair: whether a pair may start, and whether its next judge call may be sent.

A run's limits are asked in one place. :class:`RunGate` knows the run's
stop request (judgeflow/run/entry.py), its deadline (the time budget), its
spend budget (judgeflow/run/budget.py) and its lease keeper
(judgeflow/db/leases.py). The run's schedule asks it whether to claim more
(:meth:`RunGate.why_not_claim`), and each pair gets a :class:`PairGate` made
from it, which its judge calls carry (judgeflow/judge/send_gate.py):

* **May the pair start?** Asked once its first call holds its slot, not as
  the pair is submitted: every pair of the batches in flight starts at once
  and its calls wait for the judge's slots, so each pair passes the check
  when its turn comes, after the spend of the pairs before it was charged. A
  stop, the time budget or the spend budget refuse it (it is deferred: left
  for the next run), and so does a claim another run took over.
* **May its next attempt be sent?** Once started, only ownership is asked:
  the pair is paid for in part already, and cutting it between its calls
  would waste what they cost. While the run's claims are fresh that is a
  ``time.monotonic()`` comparison; past the keeper's fresh-until it asks the
  database (:func:`judgeflow.db.leases.check_owned`), and a pair another run
  took over sends nothing more (``taken_over``).
* **May the pair run again** after a transient failure? :meth:`PairGate.why_not_run`:
  a stop or the time budget leave it for the next run; the spend budget is
  asked by the pair's loop as it charges the failed run (tasks/scoring.py).

The write's own ownership condition (judgeflow/db/results_store.py) stays the
database's guarantee; the gate only saves the judge calls.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from judgeflow.db.leases import check_owned
from judgeflow.run.entry import StopRequest

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings
    from judgeflow.db.leases import LeaseKeeper
    from judgeflow.model import TraceWork
    from judgeflow.run.budget import RunBudget


@dataclass(frozen=True)
class Refusal:
    """Why the gate said no: ``end``, the schedule's name for it (a run that
    stops claiming for this reason ends with it), and ``why``, what the pair's
    outcome says."""

    end: str
    why: str


STOPPED = Refusal("stopped", "the run was stopped")
TIME_SPENT = Refusal("deadline", "the run's time budget is spent")
SPEND_SPENT = Refusal("budget", "the run's spend budget is spent")
TAKEN_OVER = Refusal("taken_over", "another run took the pair's claim over")


class RunGate:
    """A run's limits (the module doc). ``owner`` owns the claims (None: the
    pairs are not claimed, e.g. a shadow run's: nothing to check);
    ``keeper``, its lease keeper, says how long they are fresh (without one,
    a batch claimed at a known time counts as fresh, one claimed at an
    unknown time is checked); ``deadline`` is a ``time.time()`` (None: none)."""

    def __init__(self, settings: "Settings", owner: str | None, *, stop: StopRequest | None = None,
                 deadline: float | None = None, budget: "RunBudget | None" = None,
                 keeper: "LeaseKeeper | None" = None, clock: Callable[[], float] = time.time) -> None:
        self.settings, self.owner = settings, owner
        self.stop = stop if stop is not None else StopRequest()
        self.deadline, self.budget, self.keeper, self._clock = deadline, budget, keeper, clock

    def why_not_run(self) -> Refusal | None:
        """Why no pair may start anything now (a stop, the time budget), or None."""
        if self.stop.requested():
            return STOPPED
        if self.deadline is not None and self._clock() >= self.deadline:
            return TIME_SPENT
        return None

    def why_not_claim(self) -> Refusal | None:
        """Why the run claims no more (the time budget, a stop), or None. The
        spend budget decides by estimates as the schedule admits pairs."""
        if self.deadline is not None and self._clock() >= self.deadline:
            return TIME_SPENT
        return STOPPED if self.stop.requested() else None

    def why_not_start(self) -> Refusal | None:
        """Why a pair whose first call holds its slot may not send it, or None."""
        refusal = self.why_not_run()
        if refusal is None and self.budget is not None and not self.budget.has_room():
            return SPEND_SPENT
        return refusal

    def fresh_until(self, claimed_at: float | None) -> float:
        """The ``time.monotonic()`` until which claims taken at ``claimed_at``
        need no check (the class doc)."""
        if self.owner is None:
            return math.inf
        if self.keeper is None:
            return -math.inf if claimed_at is None else math.inf
        return self.keeper.fresh_until(claimed_at)

    def pair(self, work: "TraceWork", claimed_at: float | None) -> "PairGate":
        return PairGate(self, work, claimed_at)


class PairGate:
    """The gate of one claimed pair (the module doc); a
    :class:`~judgeflow.judge.send_gate.SendGate`. ``refused`` says why it last
    refused an attempt.

    A confirmation from the database counts as claiming the pair anew: from
    then on its calls go out unchecked again for as long as the run's lease
    keeps being renewed, which is what lets a call that left the run's process
    (a judge worker) be sent at all once the run had lapsed."""

    def __init__(self, run: RunGate, work: "TraceWork", claimed_at: float | None) -> None:
        self._run, self._work, self._claimed_at = run, work, claimed_at
        self.started = False  # an attempt of the pair was let through
        self.refused: Refusal | None = None

    @property
    def pair(self) -> tuple[str, str]:
        """(trace id, metric): what a batch line of the pair's calls is recorded under (judgeflow/judge/batches.py)."""
        return self._work.trace_id, self._work.metric

    def why_not_run(self) -> Refusal | None:
        """Why the pair may not run (again) now: a stop, the time budget."""
        return self._run.why_not_run()

    def fresh_until(self) -> float:
        # before the first attempt the gate is never fresh: confirm() is asked, and the start with it
        return self._run.fresh_until(self._claimed_at) if self.started else -math.inf

    async def confirm(self) -> bool:
        if not self.started:
            self.refused = self._run.why_not_start()
            if self.refused is not None:
                return False
            self.started = True
        if time.monotonic() < self._run.fresh_until(self._claimed_at):
            return True
        run = self._run
        owned, checked_at = await asyncio.to_thread(check_owned, run.settings, run.owner, self._work, run.keeper)
        if owned:
            self._claimed_at = checked_at
        else:
            self.refused = TAKEN_OVER
        return owned
