"""The scoring flow behind a real PgBouncer (tests/support/pgbouncer.py) in
transaction and in session mode, server connections closed after 3 s
(server_lifetime) or 2 s idle: two `judgeflow score` processes at once store
every pair once, judge each pair once, deliver the alert once, and
`judgeflow status` tells the truth through the pooler."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from judgeflow.db import migrate
from judgeflow.db.pending import RUN_LOCK_NAMESPACE
from tests.flows.test_scoring_resilience import JUDGEFLOW, REPO, _env, _ground_truth
from tests.support.traces import first_step_calls, insert_traces, results, scripted_trace
from tests.support.webhook_receiver import WebhookReceiver

TRACES = 30


def _status() -> dict:
    """`judgeflow status --json` in this process (its environment points at the pooler)."""
    from typer.testing import CliRunner

    from judgeflow.cli import app

    result = CliRunner().invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["metrics"]


# Two `judgeflow score` processes: 20-100 s per mode on a busy 2-core VM. The session pool's run keeps
# the run lock as a direct connection does (tests/tasks/test_claims.py kills it through the session pool
# in the default run), so its flow-level run is kept for ./scripts/test --slow.
@pytest.mark.parametrize("mode", ["transaction", pytest.param("session", marks=pytest.mark.slow)])
def test_two_runs_through_pgbouncer_store_and_judge_each_pair_once_and_alert_once(
    mode, request, prefect_server, judgeflow_env, database_url, db, judge_server, monkeypatch
):
    bouncer = request.getfixturevalue(f"pgbouncer_{mode}")
    pooled = bouncer.url(make_url(database_url).database)
    judge_server.latency_mean_s = 0.05
    # inside the alert window: toxicity's rate (about half the scripted traces) is above its maximum
    created = datetime.now(timezone.utc) - timedelta(hours=1)
    insert_traces(db, [{**scripted_trace(i)[0], "created_at": created + timedelta(seconds=i)} for i in range(TRACES)])
    migrate.upgrade(db)

    with WebhookReceiver() as hook:
        env = _env(
            judgeflow_env, prefect_server, JUDGEFLOW_DATABASE_URL=pooled,
            JUDGEFLOW_ALERT_WEBHOOK_URL=hook.url, JUDGEFLOW_ALERT_MIN_SAMPLES="1",
            JUDGEFLOW_TOXICITY_RATE_MAX="0.1",
        )
        # both runs evaluate the alerts after scoring: the outbox's queue lock is in play
        procs = [
            subprocess.Popen([*JUDGEFLOW, "score", "--batch-size", "2", "--max-concurrency", "4"], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)
        ]
        outputs = [p.communicate(timeout=300)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs
        received = hook.ids()

    stored = results(db)
    assert len(stored) == 2 * TRACES
    assert all(r["status"] == "scored" and r["error_kind"] is None for r in stored.values()), [
        (k, r["status"], r["error"]) for k, r in stored.items() if r["status"] != "scored"][:3]
    calls = first_step_calls(judge_server)
    # when the server received each repeated call (time.monotonic()): seconds apart is a judge timeout's retry
    twice = {key: [round(r.received_at, 2) for r in judge_server.requests
                   if r.data and (r.data.get("output"), r.step) == key] for key, n in calls.items() if n > 1}
    assert len(calls) == 2 * TRACES and not twice, f"a (trace, metric) reached the judge twice: {twice}"
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.superseded_results")).scalar_one() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0
    # no statement met another client's prepared statement (or missed its own), not even one a retry hid
    assert not [out for out in outputs if "prepared statement" in out.lower()], outputs

    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", pooled)
    status, truth = _status(), _ground_truth(db)
    for metric, want in truth.items():
        assert status[metric]["scored"] == want["scored"] == TRACES
        assert status[metric]["pending"] == status[metric]["in_progress"] == 0

    # the toxicity alert fired once, and its notification reached the webhook once
    with db.connect() as conn:
        deliveries = conn.execute(sa.text(
            "SELECT e.kind, d.status, e.delivery_id FROM judgeflow.alert_deliveries d "
            "JOIN judgeflow.alert_events e ON e.id = d.event_id WHERE d.channel = 'webhook'")).all()
    assert [(kind, status) for kind, status, _ in deliveries] == [("fired", "delivered")], deliveries
    assert received == [str(deliveries[0].delivery_id)], received


FROZEN_TRACES = 12


# Two `judgeflow score` processes and a lease wait (1-3 minutes on a busy 2-core VM): kept for
# ./scripts/test --slow; tests/db/test_leases.py checks the same rule on a keeper held still, by default.
@pytest.mark.slow
@pytest.mark.parametrize("judge_processes", ["1", "2"], ids=["in-process", "worker"])
def test_a_run_frozen_past_its_lease_behind_a_transaction_pool_judges_none_of_the_pairs_it_had_queued(
    judge_processes, prefect_server, judgeflow_env, database_url, db, judge_server, pgbouncer_transaction
):
    """Run A claims every pair in one batch and queues them all for the judge
    (one call in flight, held by the judge server; the others waiting for
    the judge's slot behind it); it is frozen (SIGSTOP)
    past its lease while run B takes every pair over and scores it; then it
    goes on. On resume A's lease has not been renewed within its lifetime, so
    each call it would send asks the database first (the send gate,
    judgeflow/judge/send_gate.py): the call prepared ahead, every pair's
    next step, every pair still queued. So after the freeze no request of A
    reaches the judge at all, and the only pair judged twice is the one whose
    request was already on the wire when A was frozen (the server received it
    before the SIGSTOP and answers it only after B is done). With judge worker
    processes (which SIGSTOP does not freeze) the call prepared ahead waits in
    a worker: past the freshness it went with, the worker hands it back
    unsent instead of sending it while A is frozen."""
    import os
    import signal
    import threading
    import time

    from tests.flows.test_scoring_resilience import _judge_key, _leases_running, _start_score, _wait_for
    from tests.support.judge_server import rule_responder

    pooled = pgbouncer_transaction.url(make_url(database_url).database)
    insert_traces(db, [scripted_trace(i)[0] for i in range(FROZEN_TRACES)])
    migrate.upgrade(db)
    release_a = threading.Event()

    def from_run_a(req) -> bool:  # its API key, in whichever header the client sends it
        return any("key-a" in value for value in req.headers.values())

    def holds_run_a(req):  # run A's calls wait until the test lets them go; B's are answered at once
        if from_run_a(req):
            release_a.wait(300)
        return rule_responder(req)

    judge_server.responder = holds_run_a
    env = _env(judgeflow_env, prefect_server, JUDGEFLOW_DATABASE_URL=pooled, JUDGEFLOW_LEASE_TIMEOUT_S="3",
               JUDGEFLOW_JUDGE_TIMEOUT_S="300", JUDGEFLOW_POOL_MODE="auto", JUDGEFLOW_JUDGE_PROCESSES=judge_processes)
    run_a = _start_score({**env, "JUDGEFLOW_JUDGE_API_KEY": "key-a"}, "--batch-size", str(2 * FROZEN_TRACES),
                         "--max-concurrency", "1")
    try:
        _wait_for(lambda: judge_server.in_flight > 0 or run_a.poll() is not None, "run A's first judge call")
        assert run_a.poll() is None, run_a.communicate()[0]
        time.sleep(1.0)  # its batch's other pairs queue behind that call
        frozen_at = time.monotonic()
        os.kill(run_a.pid, signal.SIGSTOP)
        with db.connect() as conn:
            owner_a = conn.execute(sa.text("SELECT min(owner) FROM judgeflow.claims")).scalar_one()
        _wait_for(lambda: _leases_running(db, owner_a) == 0, "run A's lease to run out")
        run_b = _start_score({**env, "JUDGEFLOW_JUDGE_API_KEY": "key-b"}, "--batch-size", "6",
                             "--max-concurrency", "4")
        out_b = run_b.communicate(timeout=300)[0]
        assert run_b.returncode == 0, out_b
        release_a.set()
    finally:
        release_a.set()
        os.kill(run_a.pid, signal.SIGCONT)
    out_a = run_a.communicate(timeout=300)[0]
    assert run_a.returncode == 0, out_a

    stored = results(db)
    assert len(stored) == 2 * FROZEN_TRACES and all(r["status"] == "scored" for r in stored.values())
    from_a = [r for r in judge_server.requests if from_run_a(r)]
    on_the_wire = [r for r in from_a if r.received_at < frozen_at]
    # max_concurrency 1: one request of A's was on the wire at the freeze; none reached the judge after it
    assert len(on_the_wire) == 1, [(r.step, r.received_at - frozen_at) for r in from_a]
    assert [r for r in from_a if r.received_at >= frozen_at] == [], [
        (r.step, round(r.received_at - frozen_at, 2)) for r in from_a]
    calls, keys = first_step_calls(judge_server), _judge_key(FROZEN_TRACES)
    judged_twice = {pair for pair, key in keys.items() if calls[key] > 1}
    wire = {pair for pair, key in keys.items() if key == (on_the_wire[0].data["output"], on_the_wire[0].step)}
    assert judged_twice <= wire, (judged_twice, wire)  # by A before the freeze, and by B
    assert sum(calls[key] for key in keys.values()) == 2 * FROZEN_TRACES + len(judged_twice)
    assert "taken over by another run |" in out_a, out_a
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = "
                                    "CAST(CAST(:ns AS int) AS oid)"), {"ns": RUN_LOCK_NAMESPACE}).scalar_one() == 0
