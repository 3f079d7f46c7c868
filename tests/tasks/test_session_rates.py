"""Each trace metric's session rate stored from the turns' results in the real PostgreSQL: one row per
session and rate at no judge cost, nothing for a session with no scored turn, the replaced row kept as
history, and the sessions read in one query per batch."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from judgeflow.config.settings import Settings
from judgeflow.metrics.registry import metric_names
from judgeflow.sources.identity import result_source
from tasks.session_rates import store_rates
from tests.support.session_rows import add_result, seed_session

T0 = datetime(2026, 11, 28, 10, tzinfo=timezone.utc)


def _rows(db, metric: str) -> dict[str, sa.Row]:
    with db.connect() as conn:
        return {r.trace_id: r for r in conn.execute(sa.text(
            "SELECT trace_id, status, score, passed, threshold, details, judge_calls, cost_usd, trace_created_at, "
            "source, segment FROM judgeflow.eval_results WHERE metric = :m"), {"m": metric})}


def test_session_rates_are_stored_from_the_turns_with_history_and_one_read_per_batch(database_url, db):
    settings = Settings(database_url=database_url)
    source = result_source(settings)
    m, other = metric_names()[:2]
    with db.begin() as conn:
        bad = seed_session(conn, source, "bad", T0, {m: [True, False, True, True], other: [None] * 4},
                           segment={"model": "x"})
        good = seed_session(conn, source, "good", T0, {m: [True, True], other: [True, None]})
        unscored = seed_session(conn, source, "unscored", T0, {m: [None, None, None], other: [None] * 3})
    figures = store_rates(settings, [bad, good, unscored, "s:unknown"], flow_run_id="run-1")
    assert (figures.written, figures.unchanged, figures.no_scored_turn) == (3, 0, 3)

    rates = _rows(db, f"{m}_session")
    assert set(rates) == {bad, good}  # the unscored session has no row: never a pass by default
    row = rates[bad]
    assert (row.status, row.score, row.passed, row.threshold) == ("scored", 0.25, False, 0.0)
    assert row.details == {"turns": 4, "scored_turns": 4, "failed_turns": 1}
    assert (row.judge_calls, row.cost_usd, row.source, row.segment) == (0, 0, source, {"model": "x"})
    assert row.trace_created_at == T0.replace(minute=3)  # the session's last turn
    assert rates[good].passed is True and rates[good].score == 0
    assert set(_rows(db, f"{other}_session")) == {good}

    # the session grows by a failed turn: its row is replaced, the replaced one kept as history
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO judgeflow.session_turns VALUES (:src, 'good-t2', :s, :c)"),
                     {"src": source, "s": good, "c": T0.replace(minute=5)})
        conn.execute(sa.text("UPDATE judgeflow.sessions SET turns = 3, last_turn_at = :c WHERE session_id = :s"),
                     {"s": good, "c": T0.replace(minute=5)})
        add_result(conn, "good-t2", m, False, T0.replace(minute=5), source=source)
    again = store_rates(settings, [bad, good], flow_run_id="run-2")
    # the grown session's two rates changed (the other's saw a turn more); the bad session's did not
    assert (again.written, again.unchanged) == (2, 1)
    grown = _rows(db, f"{m}_session")[good]
    assert (grown.passed, grown.details["failed_turns"], grown.details["turns"]) == (False, 1, 3)
    with db.connect() as conn:
        history = conn.execute(sa.text("SELECT metric, score, turns, flow_run_id FROM judgeflow.session_scores "
                                       "WHERE session_id = :s ORDER BY metric, id"), {"s": good}).all()
    # the session's history (judgeflow.session_scores): both rates of run-1, then the two run-2 changed
    assert sorted((metric, round(score, 6), turns, run) for metric, score, turns, run in history) == sorted([
        (f"{m}_session", 0.0, 2, "run-1"), (f"{m}_session", round(1 / 3, 6), 3, "run-2"),
        (f"{other}_session", 0.0, 2, "run-1"), (f"{other}_session", 0.0, 3, "run-2")])
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.superseded_results")).scalar_one() == 0


def test_sessions_are_read_in_one_query_per_batch_not_per_session(database_url, db, monkeypatch):
    import tasks.session_rates as module

    settings = Settings(database_url=database_url)
    source = result_source(settings)
    m = metric_names()[0]
    with db.begin() as conn:
        ids = [seed_session(conn, source, f"k{i}", T0, {m: [True, i % 2 == 0]}) for i in range(7)]
    reads = []
    real = module.read_session_turns
    monkeypatch.setattr(module, "SESSIONS_PER_QUERY", 3)
    monkeypatch.setattr(module, "read_session_turns", lambda conn, batch, metrics: reads.append(len(batch))
                        or real(conn, batch, metrics))
    assert store_rates(settings, ids).written == 7
    assert reads == [3, 3, 1]
    assert sum(not r.passed for r in _rows(db, f"{m}_session").values()) == 3
