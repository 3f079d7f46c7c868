"""The send gate (judgeflow/judge/send_gate.py) in the real scoring flow, on
PostgreSQL, with litellm over real HTTP to the local judge server: a call a
run prepared for a pair is not sent once another run has taken the pair over,
even though the run checked the pair before it started judging it."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import sqlalchemy as sa

from judgeflow.flows.scoring import score_new_traces
from tests.support.judge_server import rule_responder
from tests.support.traces import first_step_calls, insert_traces, results, scripted_trace
from tests.tasks.test_claims import _run_lock

RUN_B_KEY = 77  # the run lock of the run that takes the pair over, held by the test


def _run_lock_backends(db) -> list[int]:
    """The backends of the runs' lease keepers holding a run lock now."""
    with db.connect() as conn:
        return conn.execute(sa.text(
            "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
            "WHERE a.application_name LIKE 'judgeflow run lock %' AND l.locktype = 'advisory' AND l.granted"
        )).scalars().all()


def _eventually(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


class _LogLine(logging.Handler):
    """Sets ``seen`` once judgeflow.claims (the lease keeper's logger) logs a line holding ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.WARNING)
        self.text, self.seen = text, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


class TakeOverWhileOnTheWire:
    """A responder that, on the run's first request, makes the run lose one
    pair it has claimed and already checked, and answers only once the run
    knows its claims may have moved:

    1. the run's lock connection is killed (a pooler or an administrator closing
       it), so its claims look free to other runs;
    2. "run B" (the test, holding run lock ``RUN_B_KEY``) takes ``taken`` over,
       as a claim does: its owner, key and lease;
    3. the run's lease keeper takes its lock back: from then on the run asks
       the database before sending a call for a pair it claimed before.
    """

    def __init__(self, db, rows: list[dict]) -> None:
        self.db, self.rows = db, rows
        self.on_the_wire: dict | None = None  # the pair whose call came first: which one is the run's choice
        self.taken: dict | None = None  # the other one, prepared behind it
        self.first = threading.Lock()
        self.errors: list[BaseException] = []
        self.back = _LogLine("holds its claims again")  # the keeper's line once its claims are marked at risk

    def __call__(self, req):
        if self.first.acquire(blocking=False):
            try:
                [self.on_the_wire] = [r for r in self.rows if r["output"] == (req.data or {}).get("output")]
                [self.taken] = [r for r in self.rows if r is not self.on_the_wire]
                self._take_over()
            except BaseException as error:  # reported by the test, not swallowed by the server
                self.errors.append(error)
        return rule_responder(req)

    def _take_over(self) -> None:
        time.sleep(1.0)  # the run's other pair has its call prepared behind this one meanwhile
        [backend] = _run_lock_backends(self.db)
        with self.db.begin() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": backend})
        _eventually(lambda: backend not in _run_lock_backends(self.db), "the killed backend to let go of its lock")
        with self.db.begin() as conn:
            moved = conn.execute(sa.text(
                "UPDATE judgeflow.claims SET owner = 'run-b:1', owner_key = :k, "
                "lease_expires_at = now() + interval '15 minutes' WHERE trace_id = :t"
            ), {"k": RUN_B_KEY, "t": self.taken["id"]}).rowcount
        assert moved == 1, f"{self.taken['id']} was not claimed"
        # the keeper takes its lock back and marks its claims as at risk, then says so
        assert self.back.seen.wait(120), "the run's keeper never took its lock back"
        assert _run_lock_backends(self.db)


def test_a_pair_taken_over_after_its_check_gets_no_call_from_the_run_that_lost_it(
    prefect_server, judgeflow_env, db, judge_server, caplog
):
    rows = [scripted_trace(i)[0] for i in range(2)]
    insert_traces(db, rows)
    takeover = TakeOverWhileOnTheWire(db, rows)  # one call in flight at a time: the other pair's waits behind it
    judge_server.responder = takeover
    keeper_log = logging.getLogger("judgeflow.claims")
    keeper_log.addHandler(takeover.back)

    with _run_lock(db, RUN_B_KEY), caplog.at_level(logging.WARNING, logger="judgeflow.scoring"):
        try:
            # one call on the wire, one prepared behind it: both pairs are checked and started at once
            run_a = score_new_traces(metrics=["toxicity"], max_concurrency=1, judge_processes=1,
                                     evaluate_alerts=False)
        finally:
            keeper_log.removeHandler(takeover.back)
    assert not takeover.errors, takeover.errors
    on_the_wire, prepared = takeover.on_the_wire, takeover.taken
    assert (run_a.scored, run_a.taken_over) == (1, 1)
    # it was the send gate that held the prepared call back, not the check before judging
    assert any("its next judge call was not sent" in r.getMessage() and prepared["id"] in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]

    # run B is gone (its lock with it): the next run judges the pair
    judge_server.responder = rule_responder
    run_b = score_new_traces(metrics=["toxicity"], max_concurrency=1, judge_processes=1, evaluate_alerts=False)
    assert (run_b.scored, run_b.taken_over) == (1, 0)

    calls = first_step_calls(judge_server)
    # each pair reached the judge once in all: the taken-over pair only from run B
    assert calls == {(on_the_wire["output"], "Opinions"): 1, (prepared["output"], "Opinions"): 1}, calls
    assert judge_server.calls("Verdicts") == 2  # the later steps too: one per pair
    stored = results(db)
    assert {key: row["status"] for key, row in stored.items()} == {
        (on_the_wire["id"], "toxicity"): "scored", (prepared["id"], "toxicity"): "scored"}
    assert stored[(prepared["id"], "toxicity")]["judge_calls"] == 3  # run B's: none of run A's were billed
