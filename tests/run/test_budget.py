"""The run budget's arithmetic (judgeflow/run/budget.py): retries charged before they start, never twice."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from judgeflow.run.budget import Reservation, RunBudget
from judgeflow.judge.pricing import Prices
from judgeflow.model import ScoreOutcome, TraceWork

PRICES = Prices(input_per_mtok=100.0, output_per_mtok=200.0, source="test")


def work(trace: str = "t1") -> TraceWork:
    return TraceWork(trace_id=trace, metric="toxicity", created_at=datetime.now(timezone.utc),
                     input="a question", output="An answer. Another sentence.")


def test_a_retry_is_charged_what_the_failed_attempt_billed_and_settles_without_counting_it_twice():
    w = work()
    budget = RunBudget(10.0, PRICES)
    estimate = budget.estimate(w)[1]
    reservation = Reservation()
    budget.reserve(w, reservation)

    assert budget.charge_retry(w, 0.03, 1)  # the first attempt's opinions call, billed
    assert budget.spent_usd == pytest.approx(0.03) and budget.in_flight_usd == pytest.approx(estimate)
    assert budget.charge_retry(w, 0.05, 2)  # a second failure: only the new 0.02 is charged
    assert budget.spent_usd == pytest.approx(0.05)

    # the outcome's cost holds every attempt: the charged part is not added again
    budget.close(reservation, [ScoreOutcome(trace_id="t1", metric="toxicity", status="scored",
                                             cost_usd=0.12, judge_calls=5, attempts=3)])
    assert budget.spent_usd == pytest.approx(0.12) and budget.in_flight_usd == 0.0


def test_a_retry_that_does_not_fit_exhausts_the_budget():
    w = work()
    budget = RunBudget(1.0, PRICES)
    estimate = budget.estimate(w)[1]
    budget.limit_usd = estimate * 1.5  # room for the pair, and half of it again
    reservation = Reservation()
    budget.reserve(w, reservation)
    assert budget.charge_retry(w, estimate * 0.4, 1)  # spent 0.4 + in flight 1.0 <= 1.5
    assert not budget.exhausted
    assert not budget.charge_retry(w, estimate * 0.6, 2)  # spent 0.6 + 1.0 > 1.5: no retry
    assert budget.exhausted and budget.spent_usd == pytest.approx(estimate * 0.6)
    # deferred: what it billed is its cost, charged already
    budget.close(reservation, [ScoreOutcome(trace_id="t1", metric="toxicity", status="deferred",
                                             cost_usd=estimate * 0.6, judge_calls=2, attempts=2)])
    assert budget.spent_usd == pytest.approx(estimate * 0.6) and budget.in_flight_usd == 0.0


def test_calls_billed_at_an_unknown_price_are_charged_at_the_estimate():
    w = work()
    budget = RunBudget(10.0, PRICES)
    budget.reserve(w, Reservation())
    assert budget.charge_retry(w, 0.0, 1)
    assert budget.spent_usd == pytest.approx(budget.estimate(w)[1])
