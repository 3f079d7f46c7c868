"""A run's spend budget (``JUDGEFLOW_RUN_BUDGET_USD``, what is left of a night's
sample budget, ``judgeflow calibrate --budget-usd``): one object per run, held by
its policy (judgeflow/run/policy.py) and chosen once by :func:`run_budget`.

The run asks :meth:`RunBudget.admit` before it hands a pair to the
judge: a pair is started only when what the run has spent, plus the estimated
cost of what it has in flight, plus this pair's estimate stays within the
budget. When a pair does not fit the run first waits for work in flight to
finish (estimates are replaced by what it really cost); when nothing is in
flight and it still does not fit, the budget is exhausted: the run stops
claiming and leaves the rest pending. Estimates come from the cost model in
:mod:`judgeflow.judge.pricing`, scaled by how far off they were for the pairs
this run has finished (actual / estimated), so a run with unusual traces
corrects itself after its first results.

Every billed attempt counts, at the figure :mod:`judgeflow.judge.spend`
gives it (an attempt that timed out at its estimate). A pair's spend is
charged the moment the pair ends (:meth:`RunBudget.charge`), and each pair's
first judge call checks :meth:`RunBudget.has_room` once it holds its slot,
before it is sent (judgeflow/run/gate.py): once the spend reaches the
budget no pair starts. A pair retried after a transient judge
error runs its metric again; before the retry starts, what the failed attempt
billed is charged (:meth:`RunBudget.charge_retry`) and the retry starts only
while the spend plus the estimates in flight stay within the budget;
otherwise the pair is left for the next run. The overrun this leaves is
bounded by the pairs started and not finished when the spend reached the
budget, each with every call attempted at most the retry policy's attempts
per call (judgeflow/judge/retry.py; docs/running.md).

A sharded night's children hold one budget together: each child's budget is
handed the night's ledger (``night``, :class:`NightLedger`; the database's,
judgeflow/db/night_ledger.py) and its decisions read the night's spend and
estimates in flight, every child's, instead of its own. A pair is reserved in
the ledger at its estimate in one atomic step, and every charge is entered
there as it is made; the child's own figures stay its own, for its summary.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from judgeflow.judge.pricing import Prices, require_prices
from judgeflow.metrics.cost import estimate_pair_cost
from judgeflow.metrics.registry import spec_of
from judgeflow.model import ScoreOutcome, TraceWork

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings

# finished estimates needed before the run trusts its own actual/estimate ratio
_MIN_CALIBRATION_USD_SHARE = 0.02


@dataclass
class Reservation:
    """What a submitted task holds against the budget until it finishes:
    per (trace, metric), (the cost model's estimate, the estimate counted in flight)."""

    pairs: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    @property
    def scaled(self) -> float:
        return sum(s for _, s in self.pairs.values())


class NightLedger(Protocol):
    """The spend of a night its shards share (the module doc)."""

    def reserve(self, usd: float) -> bool:
        """Hold ``usd`` in flight if the night's spend, its estimates in flight and ``usd`` fit its budget."""

    def add(self, spent_usd: float, released_usd: float = 0.0) -> None:
        """``spent_usd`` billed; ``released_usd`` of estimates no longer in flight."""

    def totals(self, *, fresh: bool = False) -> tuple[float, float]:
        """The night's (spent, estimated in flight), every shard's (``fresh``: read now)."""


class RunBudget:
    def __init__(self, limit_usd: float, prices: Prices, *, max_field_chars: int | None = None,
                 night: NightLedger | None = None, session_max_chars: int | None = None):
        self.limit_usd = float(limit_usd)
        self.prices = prices
        self.max_field_chars = max_field_chars
        # a session metric's conversation is cut to this, not to max_field_chars (metrics/conversation.py)
        self.session_max_chars = session_max_chars
        self.night = night
        self.spent_usd = 0.0
        self.in_flight_usd = 0.0
        self.exhausted = False
        self._raw_done = 0.0
        self._actual_done = 0.0
        # per (trace, metric): what its failed attempts billed, charged before its retry
        self._charged: dict[tuple[str, str], float] = {}
        # the flow thread reserves and closes reservations; the tasks' threads charge retries
        self._lock = threading.RLock()

    def _scale(self) -> float:
        if self._raw_done <= 0 or self._raw_done < _MIN_CALIBRATION_USD_SHARE * self.limit_usd:
            return 1.0
        return self._actual_done / self._raw_done

    def estimate(self, work: TraceWork) -> tuple[float, float]:
        """(the cost model's estimate, the estimate this run counts) for one pair."""
        session = self.session_max_chars is not None and spec_of(work.metric).level == "session"
        raw = estimate_pair_cost(self.prices, work.metric, input=work.input, output=work.output, context=work.context,
                                 max_field_chars=self.session_max_chars if session else self.max_field_chars)
        return raw, raw * self._scale()

    def _committed(self) -> float:
        """Spend plus estimates in flight: the run's, or in shards the night's (read now)."""
        if self.night is not None:
            return sum(self.night.totals(fresh=True))
        return self.spent_usd + self.in_flight_usd

    def left_usd(self) -> float:
        """What the budget has left for pairs not started yet: the limit less spend and estimates in flight."""
        with self._lock:
            return max(self.limit_usd - self._committed(), 0.0)

    def admit(self, work: TraceWork, reservation: Reservation, finish_one: Callable[[], bool] | None = None
              ) -> bool:
        """Whether ``work`` may start; if so its estimate is reserved. While it
        does not fit, ``finish_one`` waits for one piece of work in flight to
        finish (whose estimate becomes a real cost; False: nothing is in
        flight). A pair that still does not fit exhausts the budget, and once
        it is exhausted no pair is admitted."""
        if self.exhausted:
            return False
        while not self.reserve(work, reservation):
            if finish_one is None or not finish_one():
                self.exhausted = True
                return False
        return True

    def reserve(self, work: TraceWork, reservation: Reservation) -> bool:
        """Hold the pair's estimate in flight if it fits (in shards: the
        night's ledger decides, in one atomic step against the siblings)."""
        raw, scaled = self.estimate(work)
        with self._lock:
            if self.night is not None:
                if not self.night.reserve(scaled):
                    return False
            elif self.spent_usd + self.in_flight_usd + scaled > self.limit_usd:
                return False
            reservation.pairs[(work.trace_id, work.metric)] = (raw, scaled)
            self.in_flight_usd += scaled
        return True

    def _spent(self, usd: float, released: float = 0.0) -> None:
        """``usd`` joins the spend (``released`` of estimates leave the flight): the run's, and the night's."""
        self.spent_usd += usd
        if self.night is not None:
            self.night.add(usd, released)

    def charge(self, work: TraceWork, billed_usd: float | None, billed_calls: int) -> None:
        """What a pair's attempts have billed so far joins the spend now, not
        when its batch ends: ``billed_usd`` is their total (counted at the
        pair's estimate when calls were made at an unknown cost); the part not
        charged yet is added."""
        key = (work.trace_id, work.metric)
        if billed_calls and not billed_usd:
            billed_usd = self.estimate(work)[1]  # billed at an unknown price: counted at its estimate
        with self._lock:
            new = max(0.0, (billed_usd or 0.0) - self._charged.get(key, 0.0))
            self._charged[key] = self._charged.get(key, 0.0) + new
            self._spent(new)

    def charge_retry(self, work: TraceWork, billed_usd: float | None, billed_calls: int = 0) -> bool:
        """A pair's attempt failed and a retry is due: charge what its attempts
        billed (:meth:`charge`); True when the retry still fits (spend +
        estimates in flight within the budget)."""
        self.charge(work, billed_usd, billed_calls)
        with self._lock:
            fits = self._committed() <= self.limit_usd
            if not fits:
                self.exhausted = True
            return fits

    def has_room(self) -> bool:
        """Whether a pair may send its first attempt: the spend charged so far
        is below the budget. Asked by every pair's first call once it holds its
        slot (judgeflow/run/gate.py), so once the spend reaches the budget
        only the pairs already started go on (docs/running.md has the bound
        this gives)."""
        with self._lock:
            # in shards the night's spend, read at most night_ledger.FRESH_S ago: its sum is the whole night's
            spent = self.spent_usd if self.night is None else self.night.totals()[0]
            if spent >= self.limit_usd:
                self.exhausted = True
                return False
            return True

    def close_one(self, reservation: Reservation, key: tuple[str, str], cost_usd: float | None) -> None:
        """One admitted pair judged outside a scoring batch (calibration) is
        done: its estimate leaves the in-flight total, and what it cost (its
        estimate when the judge reported no cost) joins the spend."""
        raw, scaled = reservation.pairs.pop(key, (0.0, 0.0))
        with self._lock:
            self.in_flight_usd = max(0.0, self.in_flight_usd - scaled)
            self._spent(scaled if cost_usd is None else cost_usd, scaled)

    def spend(self, cost_usd: float | None) -> None:
        """Spend of no pair (a metric's preparation) joins the run's."""
        with self._lock:
            self._spent(cost_usd or 0.0)

    def close(self, reservation: Reservation, outcomes: Iterable[ScoreOutcome]) -> None:
        """Work finished: its estimate leaves the in-flight total and what it cost
        joins the spend. A pair whose cost is unknown although the judge was
        (or may have been) asked, such as one that failed on garbage replies,
        counts at its estimate: the provider bills it all the same."""
        with self._lock:
            spent = 0.0
            for outcome in outcomes:
                key = (outcome.trace_id, outcome.metric)
                raw, scaled = reservation.pairs.get(key, (0.0, 0.0))
                charged = self._charged.pop(key, 0.0)  # its failed attempts, charged before its retry
                if outcome.cost_usd is not None:
                    # every attempt's cost: the charged part is in the spend already
                    spent += max(0.0, outcome.cost_usd - charged)
                    if outcome.status in ("scored", "skipped") and outcome.attempts <= 1:
                        self._raw_done += raw  # calibrates on single attempts only
                        self._actual_done += outcome.cost_usd
                elif outcome.judge_calls > 0 or (outcome.status == "failed" and outcome.error_kind != "invalid_trace"):
                    spent += max(0.0, scaled - charged)
            self._spent(spent, reservation.scaled)
            self.in_flight_usd = max(0.0, self.in_flight_usd - reservation.scaled)


def spend_budget(settings: "Settings", limit_usd: float | None, *, why: str, night: NightLedger | None = None
                 ) -> RunBudget | None:
    """A budget of ``limit_usd`` (None: none) at the judge's prices, which
    must be known (``why``: what set the budget, for the error); ``night``:
    a shard's, the ledger its night shares."""
    if limit_usd is None:
        return None
    return RunBudget(limit_usd, require_prices(settings, why=why), max_field_chars=settings.max_field_chars,
                     session_max_chars=settings.session_max_chars,
                     night=night)


def run_budget(settings: "Settings", night_limit_usd: float | None = None, night_budget_usd: float | None = None
               ) -> RunBudget | None:
    """A scoring run's one spend budget: ``JUDGEFLOW_RUN_BUDGET_USD``, or under
    a sample budget (``night_budget_usd``) what is left of the night's
    (``night_limit_usd``: its budget less what its earlier runs billed) when
    that is smaller; None without either."""
    if night_limit_usd is not None and (settings.run_budget_usd is None or night_limit_usd < settings.run_budget_usd):
        return spend_budget(settings, night_limit_usd, why=f"a sample budget of ${night_budget_usd:g} is set")
    limit = settings.run_budget_usd
    return spend_budget(settings, limit, why=f"a run budget of ${limit:g} is set" if limit is not None else "")
