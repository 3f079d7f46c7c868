"""A scoring run's spend budget (``JUDGEFLOW_RUN_BUDGET_USD``).

The run asks :meth:`RunBudget.fits` before it hands a claimed pair to the
judge: a pair is started only when what the run has spent, plus the estimated
cost of what it has in flight, plus this pair's estimate stays within the
budget. When a pair does not fit the run first waits for work in flight to
finish (estimates are replaced by what it really cost); when nothing is in
flight and it still does not fit, the budget is exhausted: the run stops
claiming and leaves the rest pending. Estimates come from the cost model in
:mod:`judgeflow.judge.pricing`, scaled by how far off they were for the pairs
this run has finished (actual / estimated), so a run with unusual traces
corrects itself after its first results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from judgeflow.judge.pricing import Prices, estimate_pair_cost
from judgeflow.tasks.work import ScoreOutcome, TraceWork

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


class RunBudget:
    def __init__(self, limit_usd: float, prices: Prices, *, max_field_chars: int | None = None):
        self.limit_usd = float(limit_usd)
        self.prices = prices
        self.max_field_chars = max_field_chars
        self.spent_usd = 0.0
        self.in_flight_usd = 0.0
        self.exhausted = False
        self._raw_done = 0.0
        self._actual_done = 0.0

    def _scale(self) -> float:
        if self._raw_done <= 0 or self._raw_done < _MIN_CALIBRATION_USD_SHARE * self.limit_usd:
            return 1.0
        return self._actual_done / self._raw_done

    def estimate(self, work: TraceWork) -> tuple[float, float]:
        """(the cost model's estimate, the estimate this run counts) for one pair."""
        raw = estimate_pair_cost(self.prices, work.metric, input=work.input, output=work.output,
                                 context=work.context, max_field_chars=self.max_field_chars)
        return raw, raw * self._scale()

    def fits(self, work: TraceWork) -> bool:
        return self.spent_usd + self.in_flight_usd + self.estimate(work)[1] <= self.limit_usd

    def reserve(self, work: TraceWork, reservation: Reservation) -> None:
        raw, scaled = self.estimate(work)
        reservation.pairs[(work.trace_id, work.metric)] = (raw, scaled)
        self.in_flight_usd += scaled

    def settle(self, reservation: Reservation, outcomes: Iterable[ScoreOutcome]) -> None:
        """Work finished: its estimate leaves the in-flight total and what it cost
        joins the spend. A pair whose cost is unknown although the judge was
        (or may have been) asked, such as one that failed on garbage replies,
        counts at its estimate: the provider bills it all the same."""
        for outcome in outcomes:
            raw, scaled = reservation.pairs.get((outcome.trace_id, outcome.metric), (0.0, 0.0))
            if outcome.cost_usd is not None:
                self.spent_usd += outcome.cost_usd
                self._raw_done += raw
                self._actual_done += outcome.cost_usd
            elif outcome.judge_calls > 0 or (outcome.status == "failed" and outcome.error_kind != "invalid_trace"):
                self.spent_usd += scaled
        self.in_flight_usd = max(0.0, self.in_flight_usd - reservation.scaled)
