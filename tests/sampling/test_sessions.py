"""Sampling with the session as the unit (issue 57, item 5): how many sessions a budget takes, and
what a decision does on the database: the chosen ones are a simple random sample with p = n/N,
the rest decided out for their turns, a grown session decided afresh, a session left out never
moved into a trace stratum's certainty phase, weights settled on what was judged. Real PostgreSQL."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import sqlalchemy as sa

from judgeflow.db.schema import eval_results
from judgeflow.db.sessions import QuietSession
from judgeflow.sampling.decisions import reweigh, settle
from judgeflow.sampling.selection import select
from judgeflow.sampling.sessions import decide, sample_size
from tests.alerts.helpers import migrated

NIGHT = date(2026, 11, 29)
T0 = datetime(2026, 11, 29, 1, 0, tzinfo=timezone.utc)


def test_the_sample_is_as_many_sessions_as_fit_at_their_mean_cost():
    assert sample_size([1.0, 1.0, 2.0], 4.0) is None  # all fit: no sample
    assert sample_size([1.0, 1.0, 2.0, 4.0], 4.5) == 2  # mean 2
    assert sample_size([1.0, 3.0], 0.5) == 0


def _sessions(n: int, turns: int = 3) -> list[QuietSession]:
    return [QuietSession(f"s:{k:02d}", turns, T0 + timedelta(minutes=k)) for k in range(n)]


def _insert(conn, sessions: list[QuietSession]) -> None:
    for s in sessions:
        conn.execute(sa.text("INSERT INTO judgeflow.sessions (session_id, source, session_key, first_turn_at, "
                             "last_turn_at, turns) VALUES (:i, 'src', :i, :at, :at, :n)"),
                     {"i": s.session_id, "at": s.last_turn_at, "n": s.turns})


def test_a_decision_samples_whole_sessions_and_decides_the_rest_out_until_they_grow(db):
    engine = migrated(db)
    sessions = _sessions(10)
    with engine.begin() as conn:
        _insert(conn, sessions)
        chosen = decide(conn, NIGHT, sessions, {s.session_id: 1.0 for s in sessions}, 4.5, "run-1")
    ids = {s.session_id for s in chosen}
    assert ids == select([s.session_id for s in sessions], 4, NIGHT)
    with engine.begin() as conn:
        rows = {r.trace_id: r for r in conn.execute(sa.text("SELECT * FROM judgeflow.sample_decisions"))}
        marked = dict(conn.execute(sa.text("SELECT session_id, judged_turns FROM judgeflow.sessions")).all())
        assert {r.phase for r in rows.values()} == {"session"} and {t for t, r in rows.items() if r.selected} == ids
        assert {r.inclusion_prob for r in rows.values()} == {0.4}
        assert {t for t, n in marked.items() if n == 3} == set(rows) - ids  # the rest decided out for 3 turns
        # three of the four judged: the run's weights stand for its ten sessions through them
        judged = sorted(ids)[:3]
        conn.execute(eval_results.insert(), [dict(
            trace_id=t, metric="resolved", status="scored", score=1.0, passed=True, threshold=0.5,
            trace_created_at=next(s.last_turn_at for s in sessions if s.session_id == t), details={"turns": 3},
            segment={}) for t in judged])
        # one left out has an old score (it was judged whole on an earlier night, then grew): a backfill's
        # reweighing never moves a session into a certainty phase
        out = sorted(set(rows) - ids)[0]
        conn.execute(eval_results.insert(), [dict(trace_id=out, metric="resolved", status="scored", score=1.0,
                                                  passed=True, threshold=0.5, trace_created_at=T0 - timedelta(days=1),
                                                  details={"turns": 2}, segment={})])
        assert reweigh(conn) == 0
        settle(conn, [NIGHT])
        probs = {r.trace_id: r.inclusion_prob for r in conn.execute(sa.text("SELECT * FROM judgeflow.sample_decisions"))}
        assert set(probs.values()) == {0.3}  # 3 judged (at the turns decided) of 10
        # the one left out grows: decided afresh for its 4 turns; with room for it, judged, its stale decision gone
        grown = QuietSession(out, 4, T0 + timedelta(hours=1))
        assert decide(conn, NIGHT, [grown], {out: 1.0}, 2.0, "run-2") == [grown]
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.sample_decisions WHERE trace_id = :t"),
                            {"t": out}).scalar_one() == 0
