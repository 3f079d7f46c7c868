"""A sharded night's shared ledger (judgeflow/db/night_ledger.py) against the real PostgreSQL:
two children's run budgets (judgeflow/run/budget.py), each admitting pairs from a thread of its
own, hold one budget for the night, not one each; the trace limit counts the night's traces."""

from __future__ import annotations

import threading
from collections import deque
from datetime import datetime, timezone

import pytest

from judgeflow.db.night_ledger import NightLimits, NightSpend, NightTraces, night_limits, night_spend, open_night
from judgeflow.judge.pricing import Prices
from judgeflow.model import ScoreOutcome, TraceWork
from judgeflow.run.budget import Reservation, RunBudget

PRICES = Prices(input_per_mtok=100.0, output_per_mtok=200.0, source="test")


def _work(i: int) -> TraceWork:
    return TraceWork(trace_id=f"t{i}", metric="toxicity", created_at=datetime.now(timezone.utc),
                     input="a question " * 20, output="An answer. Another sentence.")


def _child(budget: RunBudget, first: int, pairs: int, in_flight: int, spent: list[float]) -> None:
    """One child: admits pairs until its budget refuses one, keeping ``in_flight`` pairs going;
    each costs 0.9 of its estimate (the budget calibrates on that)."""
    going: deque[tuple[TraceWork, Reservation]] = deque()

    def finish_one() -> bool:
        if not going:
            return False
        work, reservation = going.popleft()
        cost = 0.9 * reservation.pairs[(work.trace_id, work.metric)][0]
        budget.close(reservation, [ScoreOutcome(trace_id=work.trace_id, metric=work.metric, status="scored",
                                                cost_usd=cost, judge_calls=1, attempts=1)])
        spent.append(cost)
        return True

    for i in range(first, first + pairs):
        reservation = Reservation()
        if not budget.admit(_work(i), reservation, finish_one):
            break
        going.append((_work(i), reservation))
        while len(going) > in_flight:
            finish_one()
    while finish_one():
        pass


def test_two_childrens_budgets_hold_the_nights_budget_together(db):
    estimate = RunBudget(1.0, PRICES).estimate(_work(0))[0]
    limit = 40 * estimate  # room for ~44 pairs at their cost; each child alone has 60 to do
    with db.begin() as conn:
        open_night(conn, "parent-1", NightLimits(budget_usd=limit))
    budgets = [RunBudget(limit, PRICES, night=NightSpend(db, "parent-1")) for _ in range(2)]
    spent: list[list[float]] = [[], []]
    threads = [threading.Thread(target=_child, args=(budgets[k], 1000 * k, 60, 4, spent[k])) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    with db.connect() as conn:
        night, in_flight = night_spend(conn, "parent-1")
    billed = sum(spent[0]) + sum(spent[1])
    assert night == pytest.approx(billed) and in_flight == pytest.approx(0.0, abs=1e-12)
    assert billed <= limit  # the night's budget, not one each (which would allow 2 x limit)
    assert billed >= limit - 2 * estimate  # and it is spent, while work was left
    assert all(b.exhausted for b in budgets) and min(len(s) for s in spent) > 5  # both children did work
    assert [b.spent_usd for b in budgets] == [pytest.approx(sum(s)) for s in spent]  # each its own figure


def test_the_trace_limit_counts_the_nights_traces_once_whichever_child_took_them(db):
    with db.begin() as conn:
        open_night(conn, "parent-2", NightLimits(trace_limit=5))
        open_night(conn, "parent-2", NightLimits(trace_limit=50))  # a retried parent: the first entry stands
        assert night_limits(conn, "parent-2") == NightLimits(trace_limit=5)
    first, second = NightTraces(db, "parent-2"), NightTraces(db, "parent-2")
    assert first.take(["a", "b", "c"], 5) == {"a", "b", "c"}
    # "b" is the night's already (another metric of it may be claimed here); two new traces fit
    assert second.take(["b", "d", "e", "f"], 5) == {"b", "d", "e"}
    assert first.take(["f", "g"], 5) == set() and first.taken() == second.taken() == 5
