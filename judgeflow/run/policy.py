"""A run's policy: the one object asked whether a judge call may go now, and whether it may be sent again.

Every user of the judge (a scoring run, online or through the batch API, a
backfill, calibration, shadow scoring, ``prepare-metrics``) gets one
:class:`RunPolicy`, built once by its flow from the settings and passed down.
It holds each of the run's limits as one object:

* the **stop request** (judgeflow/run/entry.py) and the **deadline** (the time budget);
* the **spend budget** (:class:`~judgeflow.run.budget.RunBudget`): the
  schedule admits pairs through :meth:`RunPolicy.admit`, calibration too;
* **ownership**: the run's lease keeper (judgeflow/db/leases.py), whose
  freshness each pair's gate (judgeflow/run/gate.py) compares before it asks
  the database;
* not the **calls in flight**: that bound (``JUDGEFLOW_MAX_CONCURRENCY``)
  is a place on the wire, kept by the judge's one ``CallSlots``
  (judgeflow/judge/wire_slots.py) and split over judge worker processes by
  ``JudgeConfig.shares()``; the judge is started before the policy exists
  (a command's early judge), and an attempt holds its slot first and then
  asks this policy's gate, so the wire never waits on a refused call;
* the **account limit** (``account``, judgeflow/run/account.py): requests and
  tokens per minute shared by every process of an account on the same
  Prefect API (``JUDGEFLOW_JUDGE_RPM``/``_TPM``), asked before a pair's first
  call (it refuses while its Prefect API cannot be reached) and, through each
  pair's gate (``PairGate.permits``), before every attempt sent; None without
  either setting;
* the **retry levels** (``retry``, judgeflow/judge/retry.py): :meth:`RunPolicy.resend`.

The judge layer never imports this module: the policy implements the judge's
small protocols (a pair's :class:`~judgeflow.run.gate.PairGate` is a
:class:`~judgeflow.judge.send_gate.SendGate`) and is handed in.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Callable, Protocol

from judgeflow.judge.retry import GiveUp, Retry, RetryPolicy
from judgeflow.judge.send_gate import RequestPermits
from judgeflow.run.entry import StopRequest, run_stop
from judgeflow.run.gate import SPEND_SPENT, STOPPED, TIME_SPENT, PairGate, Refusal

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings
    from judgeflow.db.leases import LeaseKeeper
    from judgeflow.judge.base import Usage
    from judgeflow.model import TraceWork
    from judgeflow.run.budget import Reservation, RunBudget


class AccountLimit(RequestPermits, Protocol):
    """A limit every run of an account shares (requests or tokens per minute;
    judgeflow/run/account.py). ``why_not`` says why a pair may not start now,
    or None; as the judge's :class:`RequestPermits` it is asked before every
    attempt sent."""

    gone: Refusal | None  # its Prefect API stopped answering for good: the run claims no more

    async def why_not(self) -> Refusal | None: ...


NO_RETRY_ROOM = GiveUp("the run's spend budget has no room for a retry", later=True)


class RunPolicy:
    """A run's limits (the module doc). ``owner`` owns the claims (None: the
    pairs are not claimed, e.g. a shadow run's: nothing to check);
    ``keeper``, its lease keeper, says how long they are fresh (without one,
    a batch claimed at a known time counts as fresh, one claimed at an
    unknown time is checked); ``deadline`` is a ``time.time()`` (None: none)."""

    def __init__(self, settings: "Settings", owner: str | None = None, *, stop: StopRequest | None = None,
                 deadline: float | None = None, budget: "RunBudget | None" = None,
                 keeper: "LeaseKeeper | None" = None, retry: RetryPolicy | None = None,
                 account: AccountLimit | None = None, clock: Callable[[], float] = time.time) -> None:
        self.settings, self.owner = settings, owner
        self.stop = stop if stop is not None else StopRequest()
        self.deadline, self.budget, self.keeper, self._clock = deadline, budget, keeper, clock
        self.retry = retry if retry is not None else RetryPolicy.from_settings(settings)
        self.account = account

    @classmethod
    def for_run(cls, settings: "Settings", owner: str | None = None, **limits) -> "RunPolicy":
        """The policy of a flow run: its entry's stop request (Ctrl-C) and the
        account limit the settings set (judgeflow/run/account.py, created in
        Prefect on first use), with ``limits`` on top."""
        if "account" not in limits:
            from judgeflow.run.account import account_limit

            limits["account"] = account_limit(settings)
        return cls(settings, owner, stop=run_stop(), **limits)

    # --- may it go now -----------------------------------------------------

    def why_not_run(self) -> Refusal | None:
        """Why no pair may start anything now (a stop, the time budget), or None."""
        if self.stop.requested():
            return STOPPED
        if self.deadline is not None and self._clock() >= self.deadline:
            return TIME_SPENT
        return None

    def why_not_claim(self) -> Refusal | None:
        """Why the run claims no more (the time budget, a stop, the account
        limit's API gone), or None. The spend budget decides by estimates as
        the schedule admits pairs."""
        if self.deadline is not None and self._clock() >= self.deadline:
            return TIME_SPENT
        if self.stop.requested():
            return STOPPED
        return self.account.gone if self.account is not None else None

    async def why_not_start(self) -> Refusal | None:
        """Why a pair whose first call holds its slot may not send it, or None."""
        refusal = self.why_not_run()
        if refusal is None and self.budget is not None and not self.budget.has_room():
            return SPEND_SPENT
        if refusal is None and self.account is not None:
            return await self.account.why_not()
        return refusal

    def admit(self, work: "TraceWork", reservation: "Reservation",
              finish_one: Callable[[], bool] | None = None) -> bool:
        """Whether ``work`` may be handed to the judge under the spend budget
        (its estimate is then reserved): :meth:`RunBudget.admit`."""
        return self.budget is None or self.budget.admit(work, reservation, finish_one)

    def fresh_until(self, claimed_at: float | None) -> float:
        """The ``time.monotonic()`` until which claims taken at ``claimed_at``
        need no check (the class doc)."""
        if self.owner is None:
            return math.inf
        if self.keeper is None:
            return -math.inf if claimed_at is None else math.inf
        return self.keeper.fresh_until(claimed_at)

    def pair(self, work: "TraceWork | None", claimed_at: float | None = None) -> PairGate:
        """The gate of one pair's calls (None: a call of no claimed pair, such as a metric's preparation)."""
        return PairGate(self, work, claimed_at)

    # --- may it be sent again ------------------------------------------------

    def resend(self, attempt: int, error: Exception, *, work: "TraceWork | None" = None,
               billed: "Usage | None" = None) -> Retry | GiveUp:
        """Whether a pair whose ``attempt``-th run failed with ``error`` runs
        again (the pair level): the retry policy's :meth:`RetryPolicy.rerun`,
        and the spend budget's room for it (what the failed run billed is
        charged first). The call level decides inside the judge
        (:meth:`~judgeflow.judge.retry.CallRetry.plan`, in whichever process
        sends the attempt), from the same ``retry`` this policy holds."""
        decision = self.retry.rerun(attempt, error)
        if (isinstance(decision, Retry) and self.budget is not None and work is not None
                and not self.budget.charge_retry(work, billed.cost_usd if billed else None,
                                                 billed.calls if billed else 0)):
            return NO_RETRY_ROOM
        return decision
