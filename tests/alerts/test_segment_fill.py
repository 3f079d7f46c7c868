"""A segment key added after scoring: `report` says so, and `db fill-segments` fills it from the source."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.cli import app
from tests.alerts.helpers import add_results
from tests.support.traces import insert_traces

runner = CliRunner()


def _segments(db) -> dict[str, dict]:
    with db.connect() as conn:
        return dict(conn.execute(sa.text(
            "SELECT trace_id || '/' || metric, segment FROM judgeflow.eval_results")).all())


def test_report_names_the_keys_results_carry_and_fill_segments_adds_the_new_one(judgeflow_env, db, judge_server):
    from judgeflow.db import migrate

    migrate.upgrade(db)
    now = datetime.now(timezone.utc)
    # scored while only 'tier' was a segment key; trace 3's metadata has no app
    insert_traces(db, [{"id": f"t{i}", "output": "o", "created_at": now - timedelta(hours=2),
                        "metadata": {"app": f"app{i % 2}", "tier": "pro"} if i != 3 else {"tier": "pro"}}
                       for i in range(4)])
    with db.begin() as conn:
        for metric in ("toxicity", "hallucination"):
            conn.execute(sa.text(
                "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, trace_created_at,"
                " segment) SELECT id, :m, 'scored', 0.0, true, created_at, '{\"tier\": \"pro\"}' "
                "FROM public.llm_traces"), {"m": metric})

    report = runner.invoke(app, ["report", "--segment", "app"])
    assert report.exit_code == 0, report.output
    (note,) = [line for line in report.stdout.splitlines() if "'app'" in line]
    assert note.startswith("no result carries segment key 'app' (it was not a segment key when they were scored); "
                           "the results carry: tier since ")
    assert note.endswith("`judgeflow db fill-segments app` fills it in")
    assert json.loads(runner.invoke(app, ["report", "--json", "--segment", "app"]).stdout)["notes"] == [note]

    filled = runner.invoke(app, ["db", "fill-segments", "app"])
    assert filled.exit_code == 0, filled.output
    assert "app: 4 traces read, 3 with a value, 6 results filled (done)" in filled.stdout
    assert "app is not a segment key now" in filled.stdout  # JUDGEFLOW_ALERT_SEGMENT_BY is unset here
    segments = _segments(db)
    assert segments["t1/toxicity"] == {"tier": "pro", "app": "app1"}
    assert segments["t3/hallucination"] == {"tier": "pro"}
    assert judge_server.requests == []  # read from the source's metadata, no judge call

    report = runner.invoke(app, ["report", "--segment", "app"])
    assert "'app'" not in report.stdout and "app=app0" in report.stdout  # the rollup followed the update
    again = runner.invoke(app, ["db", "fill-segments", "app"])  # resumed: only what still lacks it
    assert "app: 1 traces read, 0 with a value, 0 results filled (done)" in again.stdout


def test_a_key_carried_only_lately_is_said_with_its_start(judgeflow_env, db):
    from judgeflow.db import migrate

    migrate.upgrade(db)
    add_results(db, passed=3, age=timedelta(days=3))
    add_results(db, passed=3, segment={"app": "a"}, age=timedelta(hours=1))
    report = runner.invoke(app, ["report", "--segment", "app", "--since", "7d"])
    (note,) = [line for line in report.stdout.splitlines() if "'app'" in line]
    assert note.startswith("segment key 'app': only results of traces since ")
