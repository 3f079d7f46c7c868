"""Sessions seeded straight into the test database: judgeflow.sessions, their session_turns and the
turns' eval_results rows, as the session flow and scoring would have left them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from judgeflow.sources.session_id import session_result_id
from tests.support.traces import insert_traces


def seed_session(conn, source: str, key: str, start: datetime, turns: dict[str, list[bool | None]], *,
                 gap: timedelta = timedelta(minutes=1), segment: dict | None = None) -> str:
    """Session ``key`` of ``source``: ``turns`` maps a trace metric to each turn's ``passed`` (True,
    False; None: the turn has no result of it); the turns start at ``start``, ``gap`` apart. Returns the
    session's result id."""
    count = max(len(passes) for passes in turns.values())
    session_id = session_result_id(source, key)
    times = [start + gap * i for i in range(count)]
    conn.execute(sa.text(
        "INSERT INTO judgeflow.sessions (session_id, source, session_key, first_turn_at, last_turn_at, turns) "
        "VALUES (:s, :source, :key, :first, :last, :n)"),
        {"s": session_id, "source": source, "key": key, "first": times[0], "last": times[-1], "n": count})
    trace_ids = [f"{key}-t{i}" for i in range(count)]
    conn.execute(sa.text(
        "INSERT INTO judgeflow.session_turns (source, trace_id, session_id, created_at) "
        "SELECT :source, t, :s, c FROM unnest(CAST(:t AS text[]), CAST(:c AS timestamptz[])) AS x(t, c)"),
        {"source": source, "s": session_id, "t": trace_ids, "c": times})
    for metric, passes in turns.items():
        scored = [(t, c, p) for t, c, p in zip(trace_ids, times, passes) if p is not None]
        if scored:
            conn.execute(sa.text(
                "INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed, "
                "threshold, judge_calls, cost_usd, trace_created_at, source, segment) "
                "SELECT t, :m, 'v1', 'scored', CASE WHEN p THEN 0.1 ELSE 0.9 END, p, 0.5, 1, 0.001, c, :source, "
                "CAST(:seg AS jsonb) FROM unnest(CAST(:t AS text[]), CAST(:c AS timestamptz[]), "
                "CAST(:p AS boolean[])) AS x(t, c, p)"),
                {"m": metric, "source": source, "seg": json.dumps(segment or {}), "t": [x[0] for x in scored],
                 "c": [x[1] for x in scored], "p": [x[2] for x in scored]})
    return session_id


def add_result(conn, trace_id: str, metric: str, passed: bool, created: datetime, *, source: str,
               segment: dict | None = None, score: float | None = None) -> None:
    """A scored result of ``metric`` on ``trace_id`` (replacing one stored)."""
    conn.execute(sa.text(
        "INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed, threshold, "
        "judge_calls, cost_usd, trace_created_at, source, segment) VALUES (:t, :m, 'v1', 'scored', :score, "
        ":passed, 0.5, 1, 0.001, :c, :source, CAST(:seg AS jsonb)) ON CONFLICT (trace_id, metric) DO UPDATE SET "
        "passed = excluded.passed, score = excluded.score"),
        {"t": trace_id, "m": metric, "passed": passed, "c": created, "source": source,
         "score": score if score is not None else (0.1 if passed else 0.9),
         "seg": json.dumps(segment or {})})


SESSION_METRIC_FILE = '''
[metrics.resolved]
level = "session"
criteria = "By the end of the conversation the user's request was resolved."
evaluation_steps = ["Read what the user wanted.", "Decide whether the last turns resolve it."]
'''


def serve_session_metric(monkeypatch, tmp_path):
    """The session metric ``resolved`` served from a metrics file named in the env; a generator: the
    fixture's body (it stops serving it after)."""
    from judgeflow.run.metric_door import open_metrics

    path = tmp_path / "metrics.toml"
    path.write_text(SESSION_METRIC_FILE, encoding="utf-8")
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(path))
    yield path
    open_metrics(None)


def scored_session(db, source: str, key: str, start: datetime, outputs: list[str], judged_turns: int) -> str:
    """Session ``key`` with a turn per output in the source and judgeflow's tables, and a score of
    ``resolved`` by the judge in force that saw ``judged_turns`` of them."""
    insert_traces(db, [{"id": f"{key}-t{i}", "created_at": start + timedelta(minutes=i), "input": f"{key} q{i}",
                        "output": out, "metadata": {"session_id": key}} for i, out in enumerate(outputs)])
    with db.begin() as conn:
        sid = seed_session(conn, source, key, start, {"resolved": [None] * len(outputs)})
        conn.execute(sa.text(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, judge_model, status, score, "
            "passed, threshold, reason, judge_calls, trace_created_at, source, details) VALUES (:id, 'resolved', "
            "'v1', 'openai/judge-test', 'scored', 0.3, false, 0.5, 'not resolved', 1, :at, :s, "
            "CAST(:details AS jsonb))"),
            {"id": sid, "at": start + timedelta(minutes=len(outputs) - 1), "s": source,
             "details": f'{{"turns": {judged_turns}}}'})
    return sid


A = ["Checking.", "Still checking.", "Resolved. [geval=8]"]
CONVERSATION = [{"input": f"a q{i}", "output": out} for i, out in enumerate(A)]  # session "a"'s, as judged


def seeded_shadow_sessions(db) -> tuple[str, datetime, str]:
    """Session "a" scored at its 3 turns, "grown" at 2 of its 3: the source's identity, the start, a's id."""
    from judgeflow.run.metric_door import entry_settings
    from judgeflow.sources.identity import result_source

    from judgeflow.db import migrate

    migrate.upgrade(db)
    source = result_source(entry_settings())
    start = datetime.now(timezone.utc) - timedelta(hours=3)
    sid = scored_session(db, source, "a", start, A, 3)
    scored_session(db, source, "grown", start, ["Hi.", "Later. [geval=2]", "More."], 2)
    return source, start, sid
