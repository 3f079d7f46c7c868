"""A trace metric's session rate through the real CLI over seeded rows: `status`, `report` and their
--json count its results in sessions, never traces."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from typer.testing import CliRunner

from judgeflow.cli import app
from judgeflow.config.settings import Settings
from judgeflow.db import migrate
from judgeflow.metrics.registry import metric_names
from judgeflow.sources.identity import result_source
from tasks.session_rates import store_rates
from tests.support.session_rows import seed_session
from tests.support.traces import insert_traces, scripted_trace

runner = CliRunner()


def test_status_and_report_count_a_session_rate_in_sessions(judgeflow_env, db, database_url):
    insert_traces(db, [scripted_trace(0)[0]])  # the source table status reads
    migrate.upgrade(db)
    settings = Settings(database_url=database_url)
    metric = metric_names()[0]
    rate = f"{metric}_session"
    start = datetime.now(timezone.utc) - timedelta(hours=3)
    with db.begin() as conn:
        ids = [seed_session(conn, result_source(settings), f"chat-{i}", start, {metric: [True, i != 0, True]})
               for i in range(3)]
    assert store_rates(settings, ids).written == 3

    invoked = runner.invoke(app, ["status", "--json"])
    assert invoked.exit_code == 0, (invoked.output, invoked.exception)
    status = json.loads(invoked.stdout)
    assert status["units"][metric] == "traces" and status["units"][rate] == "sessions"
    assert (status["metrics"][rate]["scored"], status["metrics"][rate]["passed"]) == (3, 2)
    assert status["metrics"][metric]["scored"] == 9
    assert status["rates"][rate]["unit"] == "sessions" and status["rates"][rate]["sessions"] == 3
    assert "traces" not in status["rates"][rate] and status["rates"][metric]["traces"] == 9
    text = runner.invoke(app, ["status"], env={"COLUMNS": "200"}).stdout
    assert f"judged of ~3 sessions" in text and "judged of ~9 traces" in text
    assert f"{rate}: counted in sessions" in text

    report = json.loads(runner.invoke(app, ["report", "--json"]).stdout)
    [window] = [row for row in report["window"] if row["metric"] == rate and row["segment"] is None]
    assert (window["unit"], window["sessions"], window["judged"]) == ("sessions", 3, 3)
    assert window["rate"] == 1 / 3 and "traces" not in window
    [trace_row] = [row for row in report["window"] if row["metric"] == metric and row["segment"] is None]
    assert (trace_row["unit"], trace_row["traces"]) == ("traces", 9)
    shown = runner.invoke(app, ["report"]).stdout
    assert f"{rate}, per session" in shown and "counts sessions, not traces" in shown
    # a rate nothing was computed for is not listed
    other = metric_names()[1]
    assert f"{other}_session" not in status["metrics"] and f"{other}_session" not in shown


def test_status_counts_the_sessions_waiting_quiet_and_open(judgeflow_env, db, database_url):
    import sqlalchemy as sa

    from judgeflow.db.sessions import quiet_sessions

    insert_traces(db, [scripted_trace(0)[0]])
    migrate.upgrade(db)
    settings = Settings(database_url=database_url)
    source, metric = result_source(settings), metric_names()[0]
    old, now = datetime.now(timezone.utc) - timedelta(hours=3), datetime.now(timezone.utc)
    with db.begin() as conn:
        for key, start in [("quiet-1", old), ("quiet-2", old), ("judged", old), ("grown", old),
                           ("open", now - timedelta(minutes=2))]:
            seed_session(conn, source, key, start, {metric: [True, True]})
        seed_session(conn, "another-source", "elsewhere", old, {metric: [True]})
        conn.execute(sa.text("UPDATE judgeflow.sessions SET judged_turns = turns WHERE session_key = 'judged'"))
        conn.execute(sa.text("UPDATE judgeflow.sessions SET judged_turns = 1 WHERE session_key = 'grown'"))
        due_now = len(quiet_sessions(conn, source, settings.session_idle_s))

    status = json.loads(runner.invoke(app, ["status", "--json"]).stdout)
    assert status["sessions_waiting"] == {"quiet": 3, "open": 1, "idle": "30m"} and due_now == 3
    text = runner.invoke(app, ["status"], env={"COLUMNS": "200"}).stdout
    assert "sessions waiting: 3 quiet (the next run judges them), 1 still open (judged once quiet for 30m)" in text
