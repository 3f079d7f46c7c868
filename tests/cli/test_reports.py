"""`judgeflow show --json` and `status`'s footnote: the facts of the text, as data and in --help."""

from __future__ import annotations

import json

import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.cli import app
from tests.support.traces import insert_traces, scripted_trace

runner = CliRunner()


def test_show_json_holds_each_metric_state_and_its_stored_row(judgeflow_env, db):
    from judgeflow.db import migrate

    insert_traces(db, [scripted_trace(i)[0] for i in range(2)])
    migrate.upgrade(db)
    with db.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, threshold, reason, "
            "flow_run_id, trace_created_at) VALUES "
            "('tr-0000', 'toxicity', 'scored', 0.5, false, 0.4, 'rude', 'run-1', '2026-11-21T00:00Z')"))
    shown = runner.invoke(app, ["show", "tr-0000", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["phoenix_trace_id"] is None
    [trace] = data["traces"]
    metrics = {m["metric"]: m for m in trace["metrics"]}
    tox = metrics["toxicity"]
    assert tox["state"] == "scored" and tox["claim"] is None
    assert (tox["result"]["score"], tox["result"]["passed"], tox["result"]["reason"]) == (0.5, False, "rude")
    assert tox["result"]["trace_created_at"] == "2026-11-21T00:00:00+00:00"
    assert metrics["hallucination"] == {"metric": "hallucination", "state": "pending", "result": None,
                                        "claim": None, "epoch_started_at": None, "other_source": None,
                                        "flow_run_url": None}
    text = runner.invoke(app, ["show", "tr-0000"]).stdout
    assert "toxicity: score 0.500, FAILED (threshold 0.4)" in text and "hallucination: no result yet" in text


def test_status_prints_one_line_on_pending_and_its_definitions_are_in_help(judgeflow_env, db):
    import json

    from judgeflow.cli.reports import render_status

    insert_traces(db, [scripted_trace(0)[0]])
    piped = runner.invoke(app, ["status"], env={"COLUMNS": "80"}).stdout.splitlines()
    # piped (not a terminal): the table fits COLUMNS, a figure a line with the metrics across (a metric a line
    # was 132 columns); the other lines stay whole, for grep
    assert piped[0].split() == ["metric", "toxicity", "hallucination"] and piped[1].split()[0] == "scored"
    assert max(len(line) for line in piped[:10]) <= 80
    assert "pending: in the whole source (no watermark yet); `judgeflow status --help` says what each column " \
           "counts" in piped
    wide = runner.invoke(app, ["status"], env={"COLUMNS": "200"}).stdout.splitlines()
    assert wide[0].split()[:3] == ["metric", "scored", "passed"]  # a metric a line, where it fits
    # on a terminal 80 columns wide: nothing wider, every word kept
    report = json.loads(runner.invoke(app, ["status", "--json"]).stdout)
    shown = render_status(report, width=80)
    assert max(map(len, shown.splitlines())) <= 80, shown
    def notes(text: str) -> str:  # the words below the table
        return " ".join(text[text.index("pending: in"):].split())

    assert notes(shown) == notes(render_status(report, width=1000)) and "\n  " in shown  # wrapped, not cut
    helped = " ".join(runner.invoke(app, ["status", "--help"]).stdout.split())
    assert "in progress / stranded: claims held by a live run" in helped
    assert "the watermark minus JUDGEFLOW_SOURCE_LOOKBACK" in helped


def test_status_without_the_trace_source_is_one_line(judgeflow_env, db):
    """A first `status` before any trace table exists (a new user's database: the demo keeps its own): one
    line, not PostgreSQL's quote of the SQL with its caret."""
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if not line.startswith("database (")]
    assert errors == ['judgeflow: could not read results: relation "llm_traces" does not exist '
                      "(see docs/running.md)"], result.output
