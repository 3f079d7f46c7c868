"""The run's scheduling rules on their own (judgeflow/run/schedule.py): claims
and submissions are plain functions here, the batches' work finishes when the
test says, and the clock is the test's. The flow's behaviour with the real
database, Prefect and judge is tested in tests/flows/."""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime, timezone

import pytest

from judgeflow.run.budget import RunBudget
from judgeflow.judge.pricing import Prices
from judgeflow.run.schedule import (
    BUDGET, DEADLINE, DONE, LIMIT, STOPPED, Bounds, RunSchedule, default_batch_size, window_for,
)
from judgeflow.model import ClaimedBatch, Cursor, ScoreOutcome, TraceWork
from judgeflow.config.settings import Settings
from judgeflow.run.entry import StopRequest
from judgeflow.run.policy import RunPolicy

AT = datetime(2026, 11, 21, tzinfo=timezone.utc)


def _work(trace: int, metric: str = "toxicity", output: str = "fine") -> TraceWork:
    return TraceWork(trace_id=f"tr-{trace:04d}", metric=metric, created_at=AT, output=output)


class Source:
    """Claims from a list of pairs, ``room`` at a time, in order."""

    def __init__(self, pairs: list[TraceWork]):
        self.pairs = pairs
        self.claims: list[int] = []  # the room asked for, per claim

    def claim(self, room: int, cursor: Cursor | None) -> ClaimedBatch:
        self.claims.append(room)
        start = 0 if cursor is None else int(cursor.trace_id)
        items = self.pairs[start:start + room]
        if not items:
            return ClaimedBatch(items=[], cursor=None)
        return ClaimedBatch(items=items, cursor=Cursor(created_at=AT, trace_id=str(start + len(items))))


class Tasks:
    """Submitted batches as futures the test finishes: each batch finishes
    when the schedule waits for one (oldest first), scored, unless ``hold``."""

    def __init__(self, cost_usd: float | None = None):
        self.submitted: list[list[TraceWork]] = []
        self.in_flight_peak = 0
        self.cost_usd = cost_usd
        self.cancelled: list[Future] = []
        self._futures: list[tuple[Future, list[TraceWork]]] = []

    def submit(self, items: list[TraceWork], claimed_at: float) -> Future:
        future: Future = Future()
        self.submitted.append(items)
        self._futures.append((future, items))
        self.in_flight_peak = max(self.in_flight_peak, sum(not f.done() for f, _ in self._futures))
        return future

    def first_done(self, futures: list[Future]) -> Future:
        future = futures[0]
        if not future.done():
            items = next(i for f, i in self._futures if f is future)
            future.set_result([ScoreOutcome(trace_id=w.trace_id, metric=w.metric, status="scored", judge_calls=1,
                                            cost_usd=self.cost_usd) for w in items])
        return future

    def cancel(self, future: Future) -> None:
        if future.cancel():
            self.cancelled.append(future)


class Totals:
    def __init__(self):
        self.outcomes: list[ScoreOutcome] = []

    def add(self, outcomes):
        self.outcomes.extend(outcomes)


class Progress:
    def __init__(self):
        self.advanced = 0
        self.shown = 0

    def advance(self, outcomes, *, batch):
        self.advanced += len(outcomes)

    def show(self):
        self.shown += 1


def _schedule(tasks: Tasks, *, batch_size=4, window=2, limit=None, metrics=1, deadline=float("inf"),
              budget=None, clock=lambda: 0.0, stop=None) -> tuple[RunSchedule, Totals]:
    totals = Totals()
    gate = RunPolicy(Settings(_env_file=None), "run-1", stop=stop, deadline=deadline, budget=budget, clock=clock)
    schedule = RunSchedule(
        submit=tasks.submit, first_done=tasks.first_done, cancel=tasks.cancel,
        bounds=Bounds(batch_size=batch_size, window=window, limit=limit, metrics=metrics),
        policy=gate, totals=totals, progress=Progress(), clock=clock,
    )
    return schedule, totals


def test_every_pair_is_submitted_once_in_batches_and_counted_once_finished():
    source, tasks = Source([_work(i) for i in range(10)]), Tasks()
    schedule, totals = _schedule(tasks, batch_size=4, window=2)

    assert schedule.run(source.claim) == DONE
    schedule.finish()

    assert [len(b) for b in tasks.submitted] == [4, 4, 2]
    assert sorted(o.trace_id for o in totals.outcomes) == [f"tr-{i:04d}" for i in range(10)]
    assert schedule.running == []


def test_no_more_batches_in_flight_than_the_window():
    source, tasks = Source([_work(i) for i in range(40)]), Tasks()
    schedule, _ = _schedule(tasks, batch_size=2, window=3)

    schedule.run(source.claim)
    assert len(schedule.running) <= 3
    schedule.finish()
    assert tasks.in_flight_peak == 3
    assert len(tasks.submitted) == 20


def test_a_trace_limit_counts_traces_not_pairs_and_stops_claiming():
    pairs = [_work(i // 2, ("toxicity", "hallucination")[i % 2]) for i in range(20)]  # 10 traces, 2 metrics
    source, tasks = Source(pairs), Tasks()
    schedule, totals = _schedule(tasks, batch_size=5, limit=3, metrics=2)

    assert schedule.run(source.claim) == LIMIT
    schedule.finish()

    assert {o.trace_id for o in totals.outcomes} == {"tr-0000", "tr-0001", "tr-0002"}
    assert source.claims == [5]  # the first batch reached three traces: no claim after it


def test_a_claim_asks_only_for_what_the_trace_limit_leaves():
    pairs = [_work(i // 2, ("toxicity", "hallucination")[i % 2]) for i in range(20)]  # 10 traces, 2 metrics
    source, tasks = Source(pairs), Tasks()
    schedule, totals = _schedule(tasks, batch_size=4, limit=3, metrics=2)

    assert schedule.run(source.claim) == LIMIT
    schedule.finish()

    assert source.claims == [4, 2]  # two traces seen: room for one more trace's two metrics
    assert len(totals.outcomes) == 6 and {o.trace_id for o in totals.outcomes} == {"tr-0000", "tr-0001", "tr-0002"}


def test_past_the_deadline_nothing_more_is_claimed():
    now = [0.0]
    source, tasks = Source([_work(i) for i in range(10)]), Tasks()

    def claim(room, cursor):
        now[0] += 1.0  # each claim takes a second
        return source.claim(room, cursor)

    schedule, _ = _schedule(tasks, batch_size=2, window=10, deadline=2.0, clock=lambda: now[0])
    assert schedule.run(claim) == DEADLINE
    assert len(source.claims) == 2


def test_a_stop_request_ends_claiming_and_work_in_flight_is_still_counted():
    stop = StopRequest()
    source, tasks = Source([_work(i) for i in range(10)]), Tasks()
    schedule, totals = _schedule(tasks, batch_size=3, window=5, stop=stop)

    def claim(room, cursor):
        batch = source.claim(room, cursor)
        stop.request()  # Ctrl-C while the first batch is claimed
        return batch

    assert schedule.run(claim) == STOPPED
    assert len(tasks.submitted) == 1
    schedule.finish()
    assert len(totals.outcomes) == 3


def test_the_spend_budget_admits_pairs_while_they_fit_and_then_ends_claiming():
    prices = Prices(input_per_mtok=1000.0, output_per_mtok=1000.0, source="test")
    budget = RunBudget(0.5, prices)
    per_pair = budget.estimate(_work(0))[1]
    budget.limit_usd = 2.5 * per_pair  # two pairs fit, not a third
    source, tasks = Source([_work(i) for i in range(6)]), Tasks(cost_usd=per_pair)
    schedule, totals = _schedule(tasks, batch_size=2, window=5, budget=budget)

    assert schedule.run(source.claim) == BUDGET
    schedule.finish()

    assert [len(b) for b in tasks.submitted] == [2]  # the third waited for the first two, then did not fit
    assert budget.exhausted and budget.in_flight_usd == pytest.approx(0.0)
    assert budget.spent_usd == pytest.approx(2 * per_pair)
    assert len(totals.outcomes) == 2


@pytest.mark.parametrize("batch_size", [1, 10, 400])
def test_a_claim_larger_than_the_budget_is_spent_on_real_costs_whatever_the_batch_size(batch_size):
    # pairs bill half their estimate; the budget's estimates cover half of 150 pairs: the run must
    # not stop on the estimates of one claim, but admit again as real costs come in
    prices = Prices(input_per_mtok=1000.0, output_per_mtok=1000.0, source="test")
    per_pair = RunBudget(1.0, prices).estimate(_work(0))[1]
    budget = RunBudget(75 * per_pair, prices)
    source, tasks = Source([_work(i) for i in range(150)]), Tasks(cost_usd=per_pair / 2)
    schedule, totals = _schedule(tasks, batch_size=batch_size, window=3, budget=budget)

    ended = schedule.run(source.claim)
    schedule.finish()

    billed = sum(o.cost_usd for o in totals.outcomes)
    assert billed == pytest.approx(budget.spent_usd)
    assert 0.95 * budget.limit_usd <= billed <= budget.limit_usd + 1e-12
    assert ended == BUDGET and budget.in_flight_usd == pytest.approx(0.0)
    assert sum(len(b) for b in tasks.submitted) == len(totals.outcomes) < 150  # the rest stays pending


def test_a_pair_that_does_not_fit_first_sends_its_claims_admitted_pairs_and_waits_for_them():
    prices = Prices(input_per_mtok=1000.0, output_per_mtok=1000.0, source="test")
    per_pair = RunBudget(1.0, prices).estimate(_work(0))[1]
    budget = RunBudget(3.5 * per_pair, prices)
    source, tasks = Source([_work(i) for i in range(12)]), Tasks(cost_usd=per_pair / 4)
    schedule, totals = _schedule(tasks, batch_size=12, window=2, budget=budget)

    schedule.run(source.claim)
    schedule.finish()

    # three fit on estimates and go as one task; once they billed a quarter of it, the run's
    # actual/estimate ratio admits the other nine (9 x 1/4 + 3/4 = 3 <= 3.5) in a second
    assert [len(b) for b in tasks.submitted] == [3, 9]
    assert [w.trace_id for b in tasks.submitted for w in b] == [w.trace_id for w in source.pairs]
    assert budget.spent_usd == pytest.approx(3 * per_pair) and budget.in_flight_usd == pytest.approx(0.0)


def test_before_release_cancels_what_has_not_started_and_waits_for_the_rest():
    source, tasks = Source([_work(i) for i in range(6)]), Tasks()
    schedule, totals = _schedule(tasks, batch_size=2, window=5)
    schedule.run(source.claim)
    started = schedule.running[0]
    started.set_running_or_notify_cancel()  # this one is running: it cannot be cancelled
    started.set_result([])

    schedule.cancel_and_wait()

    assert len(tasks.cancelled) == 2 and started not in tasks.cancelled
    assert all(f.done() for f in schedule.running)


def test_drain_counts_what_finishes_and_logs_what_fails():
    source, tasks = Source([_work(i) for i in range(4)]), Tasks()
    schedule, totals = _schedule(tasks, batch_size=2, window=5)
    schedule.run(source.claim)
    schedule.running[0].set_exception(RuntimeError("the database went away"))

    schedule.drain()

    assert schedule.running == [] and len(totals.outcomes) == 2


def test_batch_size_and_window_follow_the_calls_in_flight():
    assert default_batch_size(8) == 100 and default_batch_size(64) == 512
    assert window_for(8, 100) == 3 and window_for(64, 512) == 3 and window_for(64, 16) == 6


def test_a_schedule_claims_again_from_the_start_after_more_work_appears():
    """A sample's top-up selects more after the run claimed all there was: ``again`` reads from the start."""
    source, tasks = Source([_work(i) for i in range(5)]), Tasks()
    schedule, totals = _schedule(tasks, batch_size=4, window=2)
    assert schedule.run(source.claim) == DONE
    schedule.finish()
    source.pairs = [_work(i) for i in range(5, 8)]  # what the top-up selected; the rest is done

    schedule.again()
    assert schedule.run(source.claim) == DONE
    schedule.finish()

    assert sorted(o.trace_id for o in totals.outcomes) == [f"tr-{i:04d}" for i in range(8)]
