"""Production data that is not clean, through the real flow: source rows
judgeflow cannot key or order, duplicate ids, and a judge whose replies
carry text PostgreSQL cannot store. The night goes on; everything is
recorded or reported; alerts run; a second run has nothing to pay for."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from judgeflow.flows.scoring import score_new_traces
from tests.support.traces import BASE_TIME, first_step_calls, results, scripted_trace

GOOD = 60


def _messy_source(db) -> list[dict]:
    """A view over app logs (no primary key) holding every bad kind."""
    good = [scripted_trace(i)[0] for i in range(GOOD)]
    unstorable = [
        {"id": f"nul-{i}", "created_at": BASE_TIME + timedelta(minutes=10 * i + 1),
         "output": f"I think plan {i} is great [judge-unstorable]. Fact: marker [halluc=0.25]."}
        for i in range(3)
    ]
    rows = good + unstorable + [
        {"id": None, "created_at": BASE_TIME + timedelta(minutes=3), "output": "no id here"},
        {"id": "no-time", "created_at": None, "output": "no timestamp here"},
        # the same id twice at different times: the earliest copy is scored
        {"id": "dup-a", "created_at": BASE_TIME + timedelta(minutes=30), "output": "Early copy. It is fine."},
        {"id": "dup-a", "created_at": BASE_TIME + timedelta(minutes=5), "output": "Earliest copy [toxic]."},
        # the same id twice at the same instant: chosen by the md5 of the output
        {"id": "dup-b", "created_at": BASE_TIME + timedelta(minutes=7), "output": "Twin one."},
        {"id": "dup-b", "created_at": BASE_TIME + timedelta(minutes=7), "output": "Twin two."},
    ]
    with db.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE app_logs (id text, created_at timestamptz, input text, output text, context jsonb)"
        )
        conn.execute(
            sa.text("INSERT INTO app_logs VALUES (:id, :created_at, 'q', :output, CAST(:context AS jsonb))"),
            [{"id": r["id"], "created_at": r["created_at"], "output": r["output"],
              "context": None if r.get("context") is None else f'["{r["context"][0]}"]'} for r in rows],
        )
        conn.exec_driver_sql("CREATE VIEW llm_traces AS SELECT * FROM app_logs")
    return good


def test_a_messy_source_and_a_misbehaving_judge_never_stop_a_night(
    prefect_server, judgeflow_env, db, judge_server, monkeypatch
):
    import hashlib

    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "10")
    good = _messy_source(db)

    state = score_new_traces(batch_size=16, evaluate_alerts=True, return_state=True)

    # pair failures never fail a run: it ends Completed, its failures listed
    assert state.is_completed(), state.message
    summary = state.result()
    stored = results(db)
    for row in good:
        for metric in ("toxicity", "hallucination"):
            assert stored[(row["id"], metric)]["status"] == "scored", stored[(row["id"], metric)]["error"]
    # the judge's NUL and lone surrogates were replaced, and the rows say so
    for i in range(3):
        for metric in ("toxicity", "hallucination"):
            got = stored[(f"nul-{i}", metric)]
            assert got["status"] == "scored", got["error"]
            assert metric in ("toxicity", "hallucination") and got["details"]["text_altered"]["fields"]
            assert "\ufffd" in (got["reason"] or "") + str(got["details"])
    # duplicates: one result per id, from the deterministic copy
    assert stored[("dup-a", "toxicity")]["score"] == 1.0  # "Earliest copy [toxic]."
    assert stored[("dup-a", "toxicity")]["trace_created_at"] == BASE_TIME + timedelta(minutes=5)
    twin = min(["Twin one.", "Twin two."], key=lambda o: hashlib.md5(o.encode()).hexdigest())
    calls = first_step_calls(judge_server)
    assert calls[(twin, "Opinions")] == 1 and sum(n for (o, _), n in calls.items() if o.startswith("Twin")) == 2
    assert sum(n for (o, _), n in calls.items() if "copy" in o) == 2
    # rows without a key or a time: never claimed, never scored, reported with the SQL to find them
    assert {tid for tid, _ in stored} == {r["id"] for r in good} | {"nul-0", "nul-1", "nul-2", "dup-a", "dup-b"}
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0
        evaluated = conn.execute(sa.text("SELECT count(*) FROM judgeflow.alerts WHERE last_evaluated_at IS NOT NULL"))
        assert evaluated.scalar_one() >= 1, "the alert rules did not run"
    assert summary.unusable_rows == {"null_id": 1, "null_created_at": 1, "duplicate_ids": 2, "duplicate_copies": 2}
    notes = "\n".join(summary.notes)
    assert '"llm_traces" WHERE id IS NULL' in notes and '"llm_traces" WHERE created_at IS NULL' in notes
    assert "HAVING count(*) > 1" in notes
    assert summary.scored == 2 * (GOOD + 5) and summary.failed == 0

    # a second run pays for nothing
    judge_server.reset()
    again = score_new_traces(batch_size=16, evaluate_alerts=True)
    assert judge_server.calls() == 0
    assert again.scored == again.failed == 0
    # it read only its window (the watermark minus the look-back: every row here), where no row has a NULL time
    assert again.unusable_rows == {**summary.unusable_rows, "null_created_at": None}


def test_db_check_reports_rows_runs_cannot_use(judgeflow_env, db):
    from judgeflow.db import migrate
    from judgeflow.status.check import check_database
    from judgeflow.config.settings import load_settings

    _messy_source(db)
    migrate.upgrade(db)
    window = check_database(load_settings())  # the window the next run reads: NULL times are in none
    warnings = [message for level, message in window.findings if level == "warn"]
    assert len(warnings) == 2 and not any("NULL created_at" in m for m in warnings), warnings
    report = check_database(load_settings(), full=True)
    warnings = [message for level, message in report.findings if level == "warn"]
    assert len(warnings) == 3, report.lines()
    assert any(m.startswith("1 row(s)") and "NULL id" in m and "WHERE id IS NULL" in m for m in warnings)
    assert any(m.startswith("1 row(s)") and "NULL created_at" in m for m in warnings)
    assert any(m.startswith("2 id(s)") and "GROUP BY id HAVING count(*) > 1" in m for m in warnings)


def _raising_view(db, n: int = 40) -> dict[str, str]:
    """A view over raw logs whose column expressions raise for some rows, each
    in another column with another error: id -> the message expected."""
    bad = {7: ("input", "invalid input syntax for type integer"),
           11: ("context", "invalid input syntax for type json"),
           17: ("metadata", "division by zero"),
           29: ("output", "refund amount missing")}
    with db.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE raw_logs (id text, created_at timestamptz, prompt text, completion text, chunks text, "
            "divisor int)"
        )
        conn.exec_driver_sql("CREATE INDEX ON raw_logs (created_at)")
        conn.exec_driver_sql(
            """
            CREATE FUNCTION checked(answer text) RETURNS text LANGUAGE plpgsql STABLE AS $$
            BEGIN
                IF strpos(answer, 'NO-AMOUNT') > 0 THEN RAISE EXCEPTION 'refund amount missing'; END IF;
                RETURN answer;
            END $$
            """
        )
        conn.execute(
            sa.text("INSERT INTO raw_logs VALUES (:id, :at, :prompt, :completion, :chunks, :divisor)"),
            [{"id": f"v-{i:02d}", "at": BASE_TIME + timedelta(minutes=i),
              "prompt": "not-a-number" if bad.get(i, ("",))[0] == "input" else str(i),
              "completion": f"Your NO-AMOUNT refund {i}" if bad.get(i, ("",))[0] == "output" else
              scripted_trace(i)[0]["output"],
              "chunks": "{broken" if bad.get(i, ("",))[0] == "context" else '{"docs": ["a doc"]}',
              "divisor": 0 if bad.get(i, ("",))[0] == "metadata" else 1}
             for i in range(n)],
        )
        conn.exec_driver_sql(
            """
            CREATE VIEW llm_traces AS
            SELECT id, created_at, prompt::int::text AS input, checked(completion) AS output,
                   (chunks::jsonb) -> 'docs' AS context,
                   jsonb_build_object('share', 10 / divisor, 'session_id', 'chat-' || mod(right(id, 1)::int, 2))
                       AS metadata
            FROM raw_logs
            """
        )
    return {f"v-{i:02d}": message for i, (_, message) in bad.items()}


def test_rows_a_view_cannot_read_are_failed_alone_and_the_rest_are_scored(
    prefect_server, judgeflow_env, db, judge_server
):
    bad = _raising_view(db)
    state = score_new_traces(batch_size=16, evaluate_alerts=True, return_state=True)

    assert state.is_completed(), state.message
    summary = state.result()
    stored = results(db)
    for i in range(40):
        for metric in ("toxicity", "hallucination"):
            row = stored[(f"v-{i:02d}", metric)]
            if f"v-{i:02d}" in bad:
                assert row["status"] == "failed" and row["error_kind"] == "invalid_trace", row
                assert bad[f"v-{i:02d}"] in row["error"] and "could not be read" in row["error"]
                assert row["judge_calls"] == 0
            else:
                assert row["status"] in ("scored", "skipped"), row["error"]
    # and the two sessions' two session rates (toxicity_session, hallucination_session), no judge call
    assert summary.sessions == 2
    assert summary.failed == 2 * len(bad) and summary.scored + summary.skipped == 2 * (40 - len(bad)) + 2 * 2
    # the turns of the sessions were recorded around the row whose metadata cannot be read: it joins
    # no session, the night went on (judgeflow/sources/trace_source.py read_session_rows)
    with db.connect() as conn:
        turns = dict(conn.execute(sa.text("SELECT trace_id, session_id FROM judgeflow.session_turns")).all())
    assert set(turns) == {f"v-{i:02d}" for i in range(40)} - {"v-17"}
    assert len(set(turns.values())) == 2
    # no bad row reached the judge; every good one did
    outputs = {req.data["output"] for req in judge_server.requests if req.data and "output" in req.data}
    assert not any("NO-AMOUNT" in o for o in outputs)

    # the next run tries the unreadable rows again (still failing), pays for nothing else
    judge_server.reset()
    again = score_new_traces(batch_size=16, evaluate_alerts=False)
    assert again.failed == 2 * len(bad) and again.scored == 0 and judge_server.calls() == 0
    assert {results(db)[(t, "toxicity")]["failed_runs"] for t in bad} == {2}

    # db check names them, with the database's message
    from judgeflow.status.check import check_database
    from judgeflow.config.settings import load_settings

    lines = "\n".join(check_database(load_settings()).lines())
    for trace_id, message in bad.items():
        assert trace_id in lines and message in lines, lines
