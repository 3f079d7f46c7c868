"""A Phoenix write-back problem stays visible until it is fixed (issue 47), through the real
scoring flow and the CLI: real PostgreSQL, real Prefect, the local judge server, Phoenix's
tables as judgeflow reads them (made here: the real Phoenix is behind ``--slow``) and
tests/support/phoenix_receiver.py answering as Phoenix does.

JUDGEFLOW_PHOENIX_URL has a wrong prefix (``/v1``, what Phoenix's banner calls its REST
API): `db check` says so; the run stops the write-back after one refused request, with one
note naming scheme, host and port only; the summary's duration includes the write-back
while Phoenix hangs; `status` and `show` carry the last error the next day, when the
``phoenix_unwritten`` rule fires; `show` takes the Phoenix trace id or any span id of the
trace; once the URL is fixed `phoenix sync` writes everything and the rule resolves."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.db import migrate
from judgeflow.phoenix.outbox import GIVE_UP_AFTER
from tests.support.phoenix_receiver import PhoenixReceiver
from tests.support.postgres import create_database, drop_database

runner = CliRunner()
TRACE = "0af7651916cd43dd8448eb211c80319c"
CHAIN, LLM_1, LLM_2, RETRIEVER = "b7ad6b7169203331", "00f067aa0ba902b7", "00f067aa0ba902b8", "53995c3f42cd8ad8"
OTHER_TRACE, OTHER_LLM = "1bf7651916cd43dd8448eb211c80319d", "11f067aa0ba902b9"

# the part of Phoenix's schema judgeflow reads (judgeflow/sources/phoenix.py)
_SCHEMA = """
CREATE TABLE projects (id serial PRIMARY KEY, name text NOT NULL);
CREATE TABLE traces (id serial PRIMARY KEY, trace_id text UNIQUE NOT NULL, project_rowid int NOT NULL);
CREATE TABLE spans (id serial PRIMARY KEY, span_id text UNIQUE NOT NULL, trace_rowid int NOT NULL, name text,
    span_kind text NOT NULL, start_time timestamptz NOT NULL, end_time timestamptz NOT NULL,
    attributes jsonb NOT NULL, status_code text NOT NULL, status_message text NOT NULL DEFAULT '');
CREATE INDEX ix_spans_start_time ON spans (start_time);
"""


def _llm(question: str, answer: str) -> str:
    return json.dumps({"llm": {
        "model_name": "gpt-app",
        "input_messages": [{"message": {"role": "user", "content": question}}],
        "output_messages": [{"message": {"role": "assistant", "content": answer}}]}})


@pytest.fixture
def phoenix_tables(pg_server):
    """A database holding two Phoenix traces: one with a CHAIN span, two LLM spans and a
    RETRIEVER span, one with a single LLM span."""
    name, url = create_database(pg_server)
    engine = sa.create_engine(url)
    start = datetime.now(timezone.utc) - timedelta(minutes=30)
    spans = [
        (1, CHAIN, "CHAIN", 0, "{}"),
        (1, RETRIEVER, "RETRIEVER", 1, json.dumps({"retrieval": {"documents": [{"document": {"content": "Paris."}}]}})),
        (1, LLM_1, "LLM", 2, _llm("Capital of France?", "Paris, of course.")),
        (1, LLM_2, "LLM", 3, _llm("And of Italy?", "You are clueless [toxic].")),
        (2, OTHER_LLM, "LLM", 4, _llm("Hello?", "Hello there.")),
    ]
    with engine.begin() as conn:
        conn.exec_driver_sql(_SCHEMA)
        conn.execute(sa.text("INSERT INTO projects (name) VALUES ('chat-app')"))
        conn.execute(sa.text("INSERT INTO traces (trace_id, project_rowid) VALUES (:a, 1), (:b, 1)"),
                     {"a": TRACE, "b": OTHER_TRACE})
        for trace, span, kind, minute, attributes in spans:
            at = start + timedelta(minutes=minute)
            conn.execute(sa.text(
                "INSERT INTO spans (span_id, trace_rowid, name, span_kind, start_time, end_time, attributes, "
                "status_code) VALUES (:s, :t, :k, :k, :at, :end, CAST(:a AS jsonb), 'OK')"),
                {"s": span, "t": trace, "k": kind, "at": at, "end": at + timedelta(seconds=5), "a": attributes})
    yield url
    engine.dispose()
    drop_database(pg_server, name)


def _cli(*args: str):
    from judgeflow.cli import app

    return runner.invoke(app, list(args))


def _rule(db) -> sa.Row | None:
    with db.connect() as conn:
        return conn.execute(sa.text(
            "SELECT state, last_outcome, violations FROM judgeflow.alerts WHERE rule = 'phoenix_unwritten' "
            "AND segment_key = ''")).first()


def test_a_wrong_phoenix_url_is_caught_stays_visible_and_pages_until_fixed(
        prefect_server, judgeflow_env, db, phoenix_tables, monkeypatch):
    from judgeflow.flows.scoring import score_new_traces

    migrate.upgrade(db)
    monkeypatch.setenv("JUDGEFLOW_SOURCE", "phoenix")
    monkeypatch.setenv("JUDGEFLOW_SOURCE_DATABASE_URL", phoenix_tables)
    monkeypatch.setenv("JUDGEFLOW_PHOENIX_WRITE_BACK", "true")
    monkeypatch.setenv("JUDGEFLOW_PHOENIX_UNWRITTEN_MAX_AGE", "1h")
    monkeypatch.setenv("JUDGEFLOW_ALERT_PREFECT_EVENTS", "false")
    spans = {CHAIN, LLM_1, LLM_2, RETRIEVER, OTHER_LLM}
    with PhoenixReceiver(spans=spans, delay_s=3.0) as phoenix:
        monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", phoenix.url + "/v1")  # Phoenix's "REST API" banner
        check = _cli("db", "check")
        [line] = [line for line in check.stdout.splitlines() if "Phoenix write-back" in line]
        assert line.startswith("[MISSING]") and "with a web page, not the API's JSON" in line, line

        summary = score_new_traces(metrics=["toxicity"])
        assert summary.scored == 3 and phoenix.posts() == [405]  # one request, then stop
        [note] = [n for n in summary.notes if n.startswith("Phoenix write-back")]
        assert f"stopped: Phoenix at {phoenix.url} refused the annotation request itself (HTTP 405)" in note
        assert "/v1/" not in note and "3 score(s) wait unwritten" in note
        # the duration covers the write-back, which waited 3 s for Phoenix
        with db.connect() as conn:
            first_scored = conn.execute(sa.text("SELECT min(scored_at) FROM judgeflow.eval_results")).scalar()
        assert summary.duration_s >= phoenix.answered_at[-1] - first_scored.timestamp() >= 3.0
        assert _rule(db).state == "ok"  # scored just now: within JUDGEFLOW_PHOENIX_UNWRITTEN_MAX_AGE

        # the next day: nothing new, still unwritten
        with db.begin() as conn:
            conn.execute(sa.text("UPDATE judgeflow.eval_results SET scored_at = scored_at - interval '1 day'"))
        status = _cli("status")
        assert "Phoenix write-back on: 3 scored result(s) not yet written to Phoenix" in status.stdout
        assert (f"Phoenix write-back's last error: Phoenix at {phoenix.url} refused the annotation request "
                "itself (HTTP 405)") in status.stdout
        checked = _cli("alerts", "check")
        assert checked.exit_code == 0, checked.output
        assert tuple(_rule(db)) == ("firing", "firing", 3)

        # `show` takes the Phoenix trace id, or any span id of the trace, and lists its LLM spans
        for some_id in (TRACE, CHAIN, RETRIEVER):
            shown = _cli("show", some_id)
            assert shown.exit_code == 0, shown.output
            assert f"Phoenix trace {TRACE}: 2 LLM span(s)" in shown.stdout
            assert shown.stdout.index(f"LLM span {LLM_1}") < shown.stdout.index(f"LLM span {LLM_2}")
            assert OTHER_LLM not in shown.stdout
            assert shown.stdout.count("toxicity: score") == 2
            assert shown.stdout.count("in Phoenix: not written yet; last error: Phoenix at ") == 2
        llm = _cli("show", LLM_2)  # an LLM span is shown alone, as before
        assert llm.stdout.startswith(f"trace {LLM_2}") and "FAILED" in llm.stdout
        unknown = _cli("show", "ffffffffffffffff")
        assert unknown.exit_code == 1 and "has no such id" in unknown.stderr

        # fixed: the sync writes them all, the error is gone and the rule resolves
        phoenix.delay_s = 0.0
        monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", phoenix.url)
        assert "[ok] Phoenix write-back" in _cli("db", "check").stdout
        synced = _cli("phoenix", "sync")
        assert synced.exit_code == 0, synced.output
        assert "3 score(s) written as span annotations" in synced.stdout
        assert sorted(span for span, _, _ in phoenix.annotations) == sorted([LLM_1, LLM_2, OTHER_LLM])
        assert "last error" not in _cli("status").stdout
        assert _cli("alerts", "check").exit_code == 0
        assert tuple(_rule(db))[:2] == ("ok", "ok")

        # a span is named with its Phoenix trace and project, and found by its id in upper case
        shown = _cli("show", LLM_1.upper())
        assert shown.stdout.splitlines()[:2] == [f"trace {LLM_1}", f"  in Phoenix: trace {TRACE}, project chat-app"]
        # a user deletes an annotation in Phoenix, and Phoenix's retention deletes a span
        del phoenix.annotations[(LLM_1, "judgeflow.toxicity", "judgeflow")]
        phoenix.spans = spans - {OTHER_LLM}
        phoenix_db = sa.create_engine(phoenix_tables)
        with phoenix_db.begin() as conn:
            conn.execute(sa.text("DELETE FROM spans WHERE span_id = :s"), {"s": OTHER_LLM})
        phoenix_db.dispose()
        repaired = _cli("phoenix", "sync", "--repair")
        assert repaired.exit_code == 1, repaired.output  # the deleted span's score is unwritten, 1 try counted
        assert (LLM_1, "judgeflow.toxicity", "judgeflow") in phoenix.annotations
        assert f"Phoenix no longer holds span {OTHER_LLM} (HTTP 404)" in repaired.stdout
        with db.begin() as conn:  # its other tries, as the nights to come would count them
            conn.execute(sa.text("UPDATE judgeflow.eval_results SET write_back_tries = :n - 1, write_back_next_at = "
                                 "now() WHERE trace_id = :t"), {"n": GIVE_UP_AFTER, "t": OTHER_LLM})
        final = _cli("phoenix", "sync")
        assert final.exit_code == 0, final.output  # final: nothing left to write
        assert "1 score(s) not written for good: Phoenix no longer holds their span" in final.stdout
        status = _cli("status").stdout
        assert "Phoenix write-back on: 0 scored result(s) not yet written to Phoenix" in status
        assert "1 scored result(s) not written for good: Phoenix no longer holds their span" in status
        # --json: `gone`, and its former name `given_up` (deprecated, docs/running.md) for scripts
        write_back = json.loads(_cli("status", "--json").stdout)["phoenix_write_back"]
        assert (write_back["unwritten"], write_back["gone"], write_back["given_up"]) == (0, 1, 1)
        gone = _cli("show", OTHER_LLM).stdout
        assert "  in Phoenix: no longer held (its retention, or a user, deleted the span)" in gone
        assert f"in Phoenix: not written for good, refused {GIVE_UP_AFTER} tries" in gone
