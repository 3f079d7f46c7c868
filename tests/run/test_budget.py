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


@pytest.fixture
def session_metric(monkeypatch, tmp_path):
    from judgeflow.run.metric_door import entry_settings
    from tests.support.session_rows import serve_session_metric

    served = serve_session_metric(monkeypatch, tmp_path)
    next(served)
    entry_settings()  # serves the file's session metric `resolved`
    yield
    next(served, None)


def test_a_session_metric_is_estimated_over_the_conversation_its_metric_sends(session_metric):
    """A session's conversation is cut at JUDGEFLOW_SESSION_MAX_CHARS, not at the per-field budget: a
    budget that cut it at the field budget would admit long sessions at a third of what they bill."""
    turns = [{"input": "q" * 900, "output": "a" * 900} for _ in range(30)]  # ~54,000 characters
    work = TraceWork(trace_id="s:" + "0" * 40, metric="resolved", created_at=datetime.now(timezone.utc),
                     context=turns)
    capped = RunBudget(10.0, PRICES, max_field_chars=20_000).estimate(work)[0]
    whole = RunBudget(10.0, PRICES, max_field_chars=20_000, session_max_chars=60_000).estimate(work)[0]
    assert whole > 2.5 * capped
    short = work.model_copy(update={"context": turns[:2]})
    assert RunBudget(10.0, PRICES, max_field_chars=20_000, session_max_chars=60_000).estimate(short)[0] == \
        RunBudget(10.0, PRICES, max_field_chars=20_000).estimate(short)[0]
