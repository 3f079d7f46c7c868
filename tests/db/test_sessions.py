"""Conversations in judgeflow's database (judgeflow/db/sessions.py): turns recorded once however
often they are read, sessions counted from what was inserted, quiet by the database's clock, bad
keys given an outcome; (session, metric) pairs claimed once across runs, a dead run's taken over;
a session marked judged only once every pair saw its turns and only if it did not grow; every
score kept as history (25_session_scores.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from judgeflow.db import sessions
from judgeflow.db.session_history import find_session, session_scores
from judgeflow.sources.session_id import session_result_id

NOW = datetime.now(timezone.utc)
OLD = NOW - timedelta(hours=2)


def _record(db, source, rows):
    with db.begin() as conn:
        sessions.record_turns(conn, source, rows)


def _quiet(db, source="src", idle_s=1800.0):
    with db.connect() as conn:
        return {q.session_id: q.turns for q in sessions.quiet_sessions(conn, source, idle_s)}


def test_turns_are_counted_once_quiet_by_the_database_clock_and_bad_keys_have_an_outcome(db):
    long_key = "k" * 10_240
    rows = [("t1", OLD, "a"), ("t2", OLD + timedelta(seconds=1), "a"), ("t3", OLD, long_key),
            ("t4", NOW, "open")]
    _record(db, "src", rows)
    _record(db, "src", rows[:2] + [("t5", OLD + timedelta(seconds=2), "a")])  # read again, with one new turn
    _record(db, "other", [("t1", OLD, "a")])  # the same key in another source: another session
    a, other = session_result_id("src", "a"), session_result_id("other", "a")
    assert _quiet(db) == {a: 3, session_result_id("src", long_key): 1}  # "open" is not quiet yet
    assert _quiet(db, "other") == {other: 1} and a != other
    with db.connect() as conn:
        found = find_session(conn, "src", long_key)
        assert found["turns"] == 1 and found["session_key"] == long_key
        assert find_session(conn, "src", "nobody") is None and find_session(conn, "src", a)["turns"] == 3
        assert [k.id for k in sessions.turn_keys(conn, [a])[a]] == ["t1", "t2", "t5"]


def _claim(db, quiet, owner, metrics=("resolved",), owner_key=None, lease_s=60.0):
    with db.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        return [(s.session_id, m) for s, m in sessions.claim_session_pairs(
            conn, quiet, list(metrics), owner=owner, owner_key=owner_key, lease_s=lease_s, max_failed_runs=3)]


def _store(db, session_id, turns, score=0.5, metric="resolved"):
    with db.begin() as conn:
        conn.execute(sa.text(
            """
            INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, details, trace_created_at, scored_at)
            VALUES (:s, :m, 'scored', :score, CAST(:d AS jsonb), now(), clock_timestamp())
            ON CONFLICT (trace_id, metric) DO UPDATE SET score = excluded.score, details = excluded.details,
                scored_at = excluded.scored_at
            """), {"s": session_id, "m": metric, "score": score, "d": json.dumps({"turns": turns})})
        conn.execute(sa.text("DELETE FROM judgeflow.claims WHERE trace_id = :s"), {"s": session_id})


def test_pairs_are_claimed_once_marked_when_all_saw_the_turns_and_judged_again_once_grown(db):
    _record(db, "src", [("t1", OLD, "a"), ("t2", OLD, "b")])
    with db.connect() as conn:
        quiet = sessions.quiet_sessions(conn, "src", 1800)
    a, b = (session_result_id("src", k) for k in "ab")
    assert sorted(_claim(db, quiet, "run-1")) == sorted([(a, "resolved"), (b, "resolved")])
    assert _claim(db, quiet, "run-2") == []  # held by run-1
    with db.begin() as conn:  # run-1 died: its lease ran out
        conn.execute(sa.text("UPDATE judgeflow.claims SET lease_expires_at = now() - interval '1 s'"))
    assert sorted(_claim(db, quiet, "run-2")) == sorted([(a, "resolved"), (b, "resolved")])  # taken over
    _store(db, a, 1, score=0.3)
    with db.begin() as conn:  # b's pair still has no result: only a is marked
        assert sessions.mark_judged(conn, quiet, ["resolved"], max_failed_runs=3) == [a]
    assert _quiet(db) == {b: 1}
    assert _claim(db, quiet, "run-3") == []  # a is done; b's claim is run-2's
    # a grows (a late turn, older than its judged one): due again, its 1-turn score no longer counts
    _record(db, "src", [("t0", OLD - timedelta(minutes=5), "a")])
    with db.connect() as conn:
        grown = [q for q in sessions.quiet_sessions(conn, "src", 1800) if q.session_id == a]
    with db.begin() as conn:  # found with 1 turn, now 2: not marked from the stale list
        assert sessions.mark_judged(conn, quiet, ["resolved"], max_failed_runs=3) == []
    assert _claim(db, grown, "run-3") == [(a, "resolved")]
    _store(db, a, 2, score=0.9)
    with db.begin() as conn:
        assert sessions.mark_judged(conn, grown, ["resolved"], max_failed_runs=3) == [a]
    with db.connect() as conn:
        history = session_scores(conn, a)["resolved"]
    assert [(h["score"], h["turns"]) for h in history] == [(0.9, 2), (0.3, 1)]  # newest first


def test_sessions_are_marked_without_a_session_metric(db):
    _record(db, "src", [("t1", OLD, "a")])
    with db.connect() as conn:
        quiet = sessions.quiet_sessions(conn, "src", 1800)
    with db.begin() as conn:
        assert sessions.mark_judged(conn, quiet, [], max_failed_runs=3) == [session_result_id("src", "a")]
    assert _quiet(db) == {}


def test_a_session_due_is_asked_by_the_database_clock(db):
    _record(db, "src", [("t1", NOW - timedelta(minutes=10), "a")])
    with db.connect() as conn:
        assert not sessions.sessions_due(conn, "src", 1800)  # quiet for 10 minutes of the 30
        assert sessions.sessions_due(conn, "src", 300) and not sessions.sessions_due(conn, "other", 300)


def test_show_tells_a_session_a_sampled_night_left_out_from_one_it_judged(monkeypatch):
    from types import SimpleNamespace

    import judgeflow.db.session_history as history

    monkeypatch.setattr(history, "registered", lambda: {"resolved": SimpleNamespace(level="session")})
    at = datetime(2026, 11, 28, 10, tzinfo=timezone.utc)
    session = {"session_id": "s:" + "0" * 40, "source": "table:llm_traces", "session_key": "chat-1", "turns": 4,
               "first_turn_at": at, "last_turn_at": at, "judged_turns": 4, "judged_at": None}
    rate = {"status": "scored", "score": 0.0, "passed": True, "reason": None, "error": None, "turns": 4,
            "metric_version": "v", "flow_run_id": "r", "judged_at": at}
    judged = dict(rate, score=0.8, turns=3)
    # decided out at 4 turns: only the session rate (no judge) saw them; the metric's score saw 3
    left = history.session_json(session, {"toxicity_session": [rate], "resolved": [judged]})
    assert left["left_out"] is True
    assert "left out of a sampled night at 4 turns" in history.render_session(left)
    # judged at its 4 turns
    seen = history.session_json(session, {"toxicity_session": [rate], "resolved": [dict(judged, turns=4)]})
    assert seen["left_out"] is False and "last judged at 4 turns" in history.render_session(seen)
