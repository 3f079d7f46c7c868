"""Claims, run liveness and late results against a real PostgreSQL: a claim
whose run is gone is taken over at once, a live run's claims are not, a run
that lost a claim cannot write over the result, and claims go back only after
the run's in-flight work has finished."""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.db.pending import RUN_LOCK_NAMESPACE
from judgeflow.config.settings import load_settings
from judgeflow.db.leases import LeaseKeeper
from judgeflow.tasks.claims import claim_traces, count_left_to_other_runs
from judgeflow.db.results_store import CLAIM_LOST, DONE_EXISTS, store_outcomes
from tests.support.traces import insert_traces, results, scripted_trace


@pytest.fixture
def settings(judgeflow_env, db):
    insert_traces(db, [scripted_trace(i)[0] for i in range(5)])
    migrate.upgrade(db)
    return load_settings()


def _claim(settings, owner, key=None, n=10):
    batch = claim_traces.fn(settings, owner, ["toxicity"], n, owner_key=key)
    return {w.trace_id for w in batch.items}


def _claims(db) -> dict[str, str]:
    with db.connect() as conn:
        return dict(conn.execute(sa.text("SELECT trace_id, owner FROM judgeflow.claims")).all())


def _row(trace_id: str, owner_run: str, status: str = "scored") -> dict:
    return {
        "trace_id": trace_id, "metric": "toxicity", "metric_version": "v", "status": status,
        "score": 0.0 if status == "scored" else None, "passed": True if status == "scored" else None,
        "threshold": 0.5, "reason": None, "details": {}, "judge_model": "m", "prompt_tokens": 1,
        "completion_tokens": 1, "cost_usd": 0.001, "latency_ms": 1.0, "judge_calls": 2, "error": None,
        "error_kind": None, "attempts": 1, "flow_run_id": owner_run,
        "trace_created_at": datetime(2026, 11, 21, tzinfo=timezone.utc),
    }


def test_a_live_runs_claims_are_kept_and_a_gone_runs_are_taken_over_at_once(settings, db):
    with LeaseKeeper(settings, "run-a:1") as keeper:
        assert _claim(settings, "run-a:1", keeper.owner_key, n=3) == {"tr-0000", "tr-0001", "tr-0002"}
        # a second run sees only what is left; run a holds its lock and a 15-minute lease
        assert _claim(settings, "run-b:1", 7) == {"tr-0003", "tr-0004"}
        with db.connect() as conn:
            locks = conn.execute(
                sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        "AND classid = CAST(CAST(:ns AS int) AS oid) AND objid = CAST(CAST(:k AS int) AS oid) AND objsubid = 2 AND granted"),
                {"ns": RUN_LOCK_NAMESPACE, "k": keeper.owner_key},
            ).scalar_one()
        assert locks == 1
    # run b's key 7 is not locked by anyone: its claims are free although their
    # lease has 15 minutes to go (run a released its own on the way out)
    assert _claims(db) == {t: "run-b:1" for t in ("tr-0003", "tr-0004")}
    assert _claim(settings, "run-c:1", 8) == {f"tr-{i:04d}" for i in range(5)}
    assert set(_claims(db).values()) == {"run-c:1"}


def test_a_live_owner_that_stopped_renewing_loses_its_claims_when_the_lease_runs_out(settings, db, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_LEASE_TIMEOUT_S", "1")
    short = load_settings()
    with LeaseKeeper(settings, "run-a:1") as keeper:  # renews every 5 minutes: as good as frozen here
        assert len(_claim(short, "run-a:1", keeper.owner_key)) == 5
        assert _claim(short, "run-b:1", 9) == set()
        with db.begin() as conn:  # the lease runs out
            conn.execute(sa.text("UPDATE judgeflow.claims SET lease_expires_at = now() - interval '1 second'"))
        assert len(_claim(short, "run-b:1", 9)) == 5


def test_the_keeper_renews_leases_from_its_own_connection(settings, db, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_LEASE_TIMEOUT_S", "1.5")
    short = load_settings()
    with LeaseKeeper(short, "run-a:1") as keeper:
        _claim(short, "run-a:1", keeper.owner_key)
        with db.connect() as conn:
            first = conn.execute(sa.text("SELECT max(lease_expires_at) FROM judgeflow.claims")).scalar_one()
            apps = conn.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :a"),
                {"a": f"judgeflow run lock {keeper.owner_key}"},
            ).scalar_one()
        assert apps == 1
        deadline = datetime.now(timezone.utc).timestamp() + 30
        while datetime.now(timezone.utc).timestamp() < deadline:
            with db.connect() as conn:
                latest = conn.execute(sa.text("SELECT min(lease_expires_at) FROM judgeflow.claims")).scalar_one()
            if latest > first:
                break
            threading.Event().wait(0.2)
        assert latest > first, "the lease was never renewed"


def test_only_the_claims_owner_writes_and_a_late_result_is_recorded_as_superseded(settings, db):
    _claim(settings, "run-a:1", 11, n=2)  # tr-0000, tr-0001; key 11 is not locked: run a is "gone"
    assert _claim(settings, "run-b:1", 12, n=1) == {"tr-0000"}  # taken over at once

    # run a comes back with results for both pairs: it owns tr-0001 still, not tr-0000
    written = store_outcomes(settings, [_row("tr-0000", "run-a"), _row("tr-0001", "run-a")],
                             owner="run-a:1", rescore_before=None)
    assert written == {("tr-0001", "toxicity")}
    assert ("tr-0000", "toxicity") not in results(db)
    # run b writes a failure for tr-0000; run a's late copy never lands
    assert store_outcomes(settings, [_row("tr-0000", "run-b", "failed")], owner="run-b:1", rescore_before=None)
    assert results(db)[("tr-0000", "toxicity")]["flow_run_id"] == "run-b"
    # the owner of a claim on a pair already done (claimed in a race with the
    # write that finished it) is superseded too, and never overwrites
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO judgeflow.claims (trace_id, metric, owner, lease_expires_at) "
                             "VALUES ('tr-0001', 'toxicity', 'run-c:1', now() + interval '1 hour')"))
    assert store_outcomes(settings, [_row("tr-0001", "run-c")], owner="run-c:1", rescore_before=None) == set()
    assert results(db)[("tr-0001", "toxicity")]["flow_run_id"] == "run-a"

    with db.connect() as conn:
        late = conn.execute(
            sa.text("SELECT trace_id, flow_run_id, owner, why, judge_calls FROM judgeflow.superseded_results "
                    "ORDER BY id")
        ).all()
    assert [tuple(r) for r in late] == [
        ("tr-0000", "run-a", "run-a:1", CLAIM_LOST, 2),
        ("tr-0001", "run-c", "run-c:1", DONE_EXISTS, 2),
    ]
    # writes release the writer's own claims only
    assert "tr-0001" not in _claims(db)


def test_claims_are_released_only_after_the_in_flight_work_finished(settings, db):
    seen: list[dict] = []
    with pytest.raises(RuntimeError):
        with LeaseKeeper(settings, "run-a:1", before_release=lambda: seen.append(_claims(db))) as keeper:
            _claim(settings, "run-a:1", keeper.owner_key)
            raise RuntimeError("collecting a result failed")
    assert seen == [{f"tr-{i:04d}": "run-a:1" for i in range(5)}], "claims were gone before the work finished"
    assert _claims(db) == {}

    def run_locks() -> int:
        with db.connect() as conn:
            return conn.execute(
                sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                        "AND classid = CAST(CAST(:ns AS int) AS oid)"),
                {"ns": RUN_LOCK_NAMESPACE},
            ).scalar_one()

    # the server ends the closed session (and drops its lock) a moment after the client closed it
    _eventually(lambda: run_locks() == 0, "the run lock to go with its session", timeout=10)


def test_pairs_left_to_other_live_runs_are_counted_per_flow_run(settings, db):
    with LeaseKeeper(settings, "run-a:1") as a:
        _claim(settings, "run-a:1", a.owner_key, n=3)
        _claim(settings, "run-b:1", 21, n=2)  # a gone run: not "left to" anyone
        assert count_left_to_other_runs.fn(settings, "run-c:1", ["toxicity", "hallucination"]) == {"run-a": 3}
        assert count_left_to_other_runs.fn(settings, "run-a:1", ["toxicity"]) == {}


@contextlib.contextmanager
def _run_lock(db, key: int):
    """Run lock ``key`` held, as a live run's keeper holds it, for the block."""
    with db.connect() as conn:
        conn.execute(sa.text("SELECT pg_advisory_lock(:ns, :k)"), {"ns": RUN_LOCK_NAMESPACE, "k": key})
        try:
            yield
        finally:
            conn.execute(sa.text("SELECT pg_advisory_unlock(:ns, :k)"), {"ns": RUN_LOCK_NAMESPACE, "k": key})


def test_a_pair_whose_claim_moved_is_not_judged_by_the_run_that_lost_it(settings, db, judge_server):
    from judgeflow.db.leases import still_owned
    from judgeflow.model import TraceWork

    _claim(settings, "run-a:1", 31, n=3)  # tr-0000..2 by a run whose lock is gone
    assert _claim(settings, "run-b:1", 32, n=2) == {"tr-0000", "tr-0001"}
    work = [TraceWork(trace_id=f"tr-{i:04d}", metric="toxicity", created_at=datetime(2026, 11, 21, tzinfo=timezone.utc),
                      output=scripted_trace(i)[0]["output"]) for i in range(3)]
    # a claim whose owner's lock is gone is not held, even by its owner
    assert still_owned(settings, "run-a:1", work) == set()
    with _run_lock(db, 31), _run_lock(db, 32):  # both runs alive again
        _still_judged_only_what_it_holds(settings, db, judge_server, work)


def _still_judged_only_what_it_holds(settings, db, judge_server, work):
    from judgeflow.db.leases import still_owned
    from judgeflow.tasks.scoring import score_batch

    assert still_owned(settings, "run-a:1", work) == {("tr-0002", "toxicity")}

    outcomes = {o.trace_id: o.status for o in score_batch.fn(work, settings, "run-a:1", flow_run_id="run-a")}
    assert outcomes == {"tr-0000": "taken_over", "tr-0001": "taken_over", "tr-0002": "scored"}
    assert judge_server.calls("Opinions") == 1  # only tr-0002 reached the judge
    assert set(results(db)) == {("tr-0002", "toxicity")}


def test_a_batch_known_fresh_skips_the_check_and_its_write_still_checks(settings, db, judge_server):
    from judgeflow.model import TraceWork

    _claim(settings, "run-a:1", 41, n=2)  # by a run whose lock is gone
    assert _claim(settings, "run-b:1", 42, n=1) == {"tr-0000"}  # taken over
    work = [TraceWork(trace_id=f"tr-{i:04d}", metric="toxicity", created_at=datetime(2026, 11, 21, tzinfo=timezone.utc),
                      output=scripted_trace(i)[0]["output"]) for i in range(2)]
    with _run_lock(db, 41), _run_lock(db, 42):  # run a back alive (run b too)
        _fresh_and_stale_batches(settings, db, judge_server, work)


def _fresh_and_stale_batches(settings, db, judge_server, work):
    import time

    from judgeflow.tasks.scoring import score_batch

    # claimed at a time nobody knows: each pair's gate checks before its first call, the lost pair is not judged
    stale = score_batch.fn(work, settings, "run-a:1", flow_run_id="run-a", claimed_at=None)
    assert {o.trace_id: o.status for o in stale} == {"tr-0000": "taken_over", "tr-0001": "scored"}
    assert judge_server.calls("Opinions") == 1

    # claimed just now, with no keeper to say it lapsed: not checked; the lost
    # pair is judged, and its write is refused all the same
    fresh = score_batch.fn(work[:1], settings, "run-a:1", flow_run_id="run-a", claimed_at=time.time())
    assert [(o.trace_id, o.status) for o in fresh] == [("tr-0000", "superseded")]
    assert judge_server.calls("Opinions") == 2
    assert ("tr-0000", "toxicity") not in results(db)
    assert _claims(db)["tr-0000"] == "run-b:1"


# --- behind PgBouncer (tests/support/pgbouncer.py: server connections closed after 3 s, or 2 s idle) ---


def _through(request, database_url: str, mode: str) -> str:
    """The test database's URL directly, or through the suite's PgBouncer in ``mode``."""
    if mode == "direct":
        return database_url
    bouncer = request.getfixturevalue(f"pgbouncer_{mode}")
    return bouncer.url(sa.engine.make_url(database_url).database)


def _keeper_backends(db, keeper) -> list[int]:
    """Backends holding ``keeper``'s run lock now."""
    with db.connect() as conn:
        return conn.execute(
            sa.text("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
                    "AND classid = CAST(CAST(:ns AS int) AS oid) AND objid = CAST(CAST(:k AS int) AS oid)"),
            {"ns": RUN_LOCK_NAMESPACE, "k": keeper.owner_key},
        ).scalars().all()


def _eventually(predicate, what: str, timeout: float = 20.0):
    import time

    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


@pytest.mark.parametrize("mode", ["direct", "session"])
def test_a_run_whose_lock_connection_is_killed_takes_it_back_in_seconds_and_skips_pairs_it_lost(
    mode, request, settings, db, database_url, judge_server, monkeypatch
):
    import time

    from judgeflow.db.pooling import DIRECT, SESSION
    from judgeflow.db.leases import VERIFY_INTERVAL_S, still_owned
    from judgeflow.run.policy import RunPolicy
    from judgeflow.tasks.scoring import score_batch

    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", _through(request, database_url, mode))
    settings = load_settings()
    owner = f"run-{mode}:1"  # the run's in-process state (identical content in flight) is its own
    with LeaseKeeper(settings, owner) as keeper:
        assert keeper.pooling.mode == {"direct": DIRECT, "session": SESSION}[mode]
        batch = claim_traces.fn(settings, owner, ["toxicity"], 10, owner_key=keeper.owner_key)
        claimed_at = time.time()
        assert len(batch.items) == 5
        [backend] = _keeper_backends(db, keeper)
        # the lock's server connection is killed (an administrator, a pooler, a failover): the
        # keeper is held still meanwhile, so another run surely finds the claims free first
        with _run_lock(db, 77):  # run b, alive throughout
            with keeper._conn_lock:
                with db.connect() as conn:
                    conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": backend})
                _eventually(lambda: not _keeper_backends(db, keeper), "the killed backend to let go of the lock")
                assert _claim(settings, "run-b:1", 77, n=2) == {"tr-0000", "tr-0001"}
            lost_at = time.monotonic()
            _eventually(lambda: _keeper_backends(db, keeper), "the keeper to take its lock back")
            assert time.monotonic() - lost_at < VERIFY_INTERVAL_S + 3
            # the rest are the run's again: nobody else can take them
            assert _claim(settings, "run-c:1", 78) == set()
            assert still_owned(settings, owner, batch.items) == {(f"tr-{i:04d}", "toxicity") for i in (2, 3, 4)}
            # the batch claimed before the lapse checks its pairs, although it was claimed a moment ago
            assert keeper.at_risk(claimed_at) and keeper.fresh_until(claimed_at) <= time.monotonic()
            outcomes = score_batch.fn(batch.items, settings, owner, flow_run_id=owner, claimed_at=claimed_at,
                                      policy=RunPolicy(settings, owner, keeper=keeper))
        assert {o.trace_id: o.status for o in outcomes} == {
            "tr-0000": "taken_over", "tr-0001": "taken_over", "tr-0002": "scored", "tr-0003": "scored",
            "tr-0004": "scored",
        }
        assert judge_server.calls("Opinions") == 3  # the two pairs run b took never reached the judge
        assert not keeper.at_risk(time.time() + 0.01)  # a batch claimed after the lapse is not checked


def test_behind_a_transaction_pool_a_run_holds_its_claims_by_lease_across_server_connection_closes(
    request, settings, db, database_url, monkeypatch, pgbouncer_transaction
):
    import time

    from judgeflow.db.pooling import TRANSACTION

    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", _through(request, database_url, "transaction"))
    # renewed every second: a keeper thread starved for a while on a loaded machine still renews in time
    lease_s = 3.0
    monkeypatch.setenv("JUDGEFLOW_LEASE_TIMEOUT_S", str(lease_s))
    settings = load_settings()
    with LeaseKeeper(settings, "run-a:1") as keeper:
        assert keeper.pooling.mode == TRANSACTION
        assert keeper.owner_key is None  # no session lock: it would live on another client's server connection
        assert len(_claim(settings, "run-a:1", keeper.owner_key)) == 5
        # past PgBouncer's server_lifetime and idle timeout, and twice the lease: renewed, still held
        deadline = time.monotonic() + max(pgbouncer_transaction.server_lifetime_s
                                          + pgbouncer_transaction.server_idle_timeout_s, 2 * lease_s) + 0.5
        while time.monotonic() < deadline:
            assert _claim(settings, "run-b:1", 9) == set()
            time.sleep(0.3)
        with db.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims WHERE owner_key IS NULL "
                                        "AND lease_expires_at > now()")).scalar_one() == 5
    assert _claims(db) == {}  # released on the way out


def test_a_runs_claim_filters_travel_as_one_typed_parameter_through_prefect_tasks(settings, db, prefect_server):
    """ClaimFilters as Prefect task parameters (called and submitted in a flow):
    the range, the run's start and the give-up count are each honoured."""
    import pickle
    from datetime import timedelta

    from prefect import flow

    from judgeflow.db.claim_filters import ClaimFilters
    from judgeflow.tasks.claims import count_pending_work
    from tests.support.traces import BASE_TIME

    filters = ClaimFilters(since=BASE_TIME + timedelta(minutes=1), until=BASE_TIME + timedelta(minutes=3),
                           max_failed_runs=3)
    assert pickle.loads(pickle.dumps(filters)) == filters

    @flow
    def claim_in_range():
        pending = count_pending_work(settings, ["toxicity"], filters)
        batch = claim_traces(settings, "run-f:1", ["toxicity"], 10, filters=filters, owner_key=None)
        left = count_left_to_other_runs.submit(settings, "run-g:1", ["toxicity"], filters).result()
        return pending, {w.trace_id for w in batch.items}, left

    pending, claimed, left = claim_in_range()
    assert pending == 2
    assert claimed == {"tr-0001", "tr-0002"}
    assert left == {"run-f": 2}
    # a pair written since the run started counts as done for it, whatever its status
    store_outcomes(settings, [_row("tr-0001", "run-f", status="failed")], owner="run-f:1", rescore_before=None)
    since_start = ClaimFilters(since=filters.since, until=filters.until, run_started=BASE_TIME)
    assert count_pending_work.fn(settings, ["toxicity"], since_start) == 0  # tr-0001 written, tr-0002 still held
    assert count_left_to_other_runs.fn(settings, "run-g:1", ["toxicity"], since_start) == {"run-f": 1}
