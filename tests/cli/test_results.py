"""`judgeflow results`: the listing as people and scripts read it."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.cli import app
from judgeflow.cli.results import render_results, segment_values

runner = CliRunner()


def _row(**kw) -> dict:
    row = {"trace_id": "t1", "metric": "toxicity", "status": "scored", "score": 0.9, "passed": False,
           "reason": "an insult\nin two lines", "error": None,
           "trace_created_at": datetime(2026, 11, 28, 10, 5, tzinfo=timezone.utc)}
    return {**row, **kw}


def test_a_line_per_result_cut_to_the_width():
    text = render_results([_row(), _row(trace_id="t2", status="failed", score=None, passed=None,
                                        error="TimeoutError " + "x" * 200)], limit=50, width=80)
    lines = text.splitlines()
    assert lines[1] == "2026-11-28 10:05  toxicity       fail     0.90  t1  an insult in two lines"
    assert lines[2].startswith("2026-11-28 10:05  toxicity       error       -  t2  TimeoutError xxx")
    assert lines[2].endswith("x…")
    assert all(len(line) <= 80 for line in lines)
    assert render_results([], limit=50) == "no result matches"
    assert render_results([_row()], limit=1).endswith("(the newest 1; --limit shows more)")


def test_segment_values_are_key_value_pairs():
    assert segment_values(["app=chat", " tier = pro "]) == {"app": "chat", "tier": "pro"}
    assert segment_values(None) is None


def test_results_lists_the_failed_as_text_and_json(judgeflow_env, db):
    from judgeflow.db import migrate

    migrate.upgrade(db)
    with db.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, reason, trace_created_at,"
            " segment, source) VALUES "
            "('a', 'toxicity', 'scored', 0.8, false, 'rude', '2026-11-28T10:00Z', '{\"app\": \"chat\"}', 's'), "
            "('b', 'toxicity', 'scored', 0.0, true, 'fine', '2026-11-28T11:00Z', '{\"app\": \"chat\"}', 's')"))
    result = runner.invoke(app, ["results", "--failed", "--segment", "app=chat", "--since", "2026-11-01"])
    assert result.exit_code == 0, result.output
    assert "toxicity       fail     0.80  a  rude" in result.stdout and " b " not in result.stdout
    listed = json.loads(runner.invoke(app, ["results", "--json", "--metric", "toxicity"]).stdout)
    assert [(r["trace_id"], r["passed"], r["trace_created_at"]) for r in listed] == [
        ("b", True, "2026-11-28T11:00:00+00:00"), ("a", False, "2026-11-28T10:00:00+00:00")]
    assert runner.invoke(app, ["results", "--failed", "--errors"]).exit_code == 2
