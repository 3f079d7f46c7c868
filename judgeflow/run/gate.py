"""One gate per pair: whether a pair may start, and whether its next judge call may be sent.

A run's limits are asked in one place, its policy
(:class:`~judgeflow.run.policy.RunPolicy`: the stop request, the deadline, the
spend budget, the lease keeper, the account limit). Each pair gets a
:class:`PairGate` made from it, which its judge calls carry
(judgeflow/judge/send_gate.py), and the refusals here keep their reasons:

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
  a stop or the time budget leave it for the next run; the retry level and
  the spend budget are the policy's :meth:`~judgeflow.run.policy.RunPolicy.resend`.

The write's own ownership condition (judgeflow/db/results_store.py) stays the
database's guarantee; the gate only saves the judge calls.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from judgeflow.db.leases import check_owned

if TYPE_CHECKING:
    from judgeflow.model import TraceWork


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


class PairGate:
    """The gate of one claimed pair (the module doc); a
    :class:`~judgeflow.judge.send_gate.SendGate`. ``refused`` says why it last
    refused an attempt.

    A confirmation from the database counts as claiming the pair anew: from
    then on its calls go out unchecked again for as long as the run's lease
    keeps being renewed, which is what lets a call that left the run's process
    (a judge worker) be sent at all once the run had lapsed."""

    def __init__(self, policy: Any, work: "TraceWork | None", claimed_at: float | None) -> None:
        # policy: the run's RunPolicy (judgeflow/run/policy.py, which makes its pairs' gates)
        self.policy, self._work, self._claimed_at = policy, work, claimed_at
        self.started = False  # an attempt of the pair was let through
        self.refused: Refusal | None = None

    @property
    def permits(self) -> Any:
        """The account limit's permits every attempt of the pair takes
        (:attr:`judgeflow.judge.send_gate.Call.permits`; None: no account limit)."""
        return getattr(self.policy, "account", None)

    @property
    def pair(self) -> tuple[str, str] | None:
        """(trace id, metric): what a batch line of the pair's calls is recorded under (judgeflow/judge/batches.py)."""
        return None if self._work is None else (self._work.trace_id, self._work.metric)

    def why_not_run(self) -> Refusal | None:
        """Why the pair may not run (again) now: a stop, the time budget."""
        return self.policy.why_not_run()

    def fresh_until(self) -> float:
        # before the first attempt the gate is never fresh: confirm() is asked, and the start with it
        if not self.started:
            return -math.inf
        return math.inf if self._work is None else self.policy.fresh_until(self._claimed_at)

    async def confirm(self) -> bool:
        if not self.started:
            self.refused = await self.policy.why_not_start()
            if self.refused is not None:
                return False
            self.started = True
        if time.monotonic() < self.fresh_until():
            return True
        run = self.policy
        owned, checked_at = await asyncio.to_thread(check_owned, run.settings, run.owner, self._work, run.keeper)
        if owned:
            self._claimed_at = checked_at
        else:
            self.refused = TAKEN_OVER
        return owned
