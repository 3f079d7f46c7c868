"""`judgeflow report --json` and the text report's intervals and judged/traffic counts (issue 40)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from tests.alerts.helpers import add_results
from tests.alerts.test_weighted_alerts import _sample


def test_report_json_rows_carry_weighted_rates_and_intervals(engine, database_url, monkeypatch, tmp_path):
    from judgeflow.cli import app

    add_results(engine, passed=99, not_passed=1, segment={"app": "big"})
    add_results(engine, passed=70, not_passed=30, segment={"app": "small"})
    add_results(engine, passed=40, segment={"app": "small"}, age=timedelta(days=2))
    _sample(engine, {"app": "big"}, 0.1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", database_url)

    result = CliRunner().invoke(app, ["report", "--json", "--segment", "app", "--since", "3d"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    window = {(r["metric"], json.dumps(r["segment"])): r for r in report["window"]}
    overall = window[("toxicity", "null")]
    assert (overall["judged"], overall["traces"]) == (200, 1100)
    assert overall["rate"] == pytest.approx(40 / 1100) and overall["ci_low"] < overall["rate"] < overall["ci_high"]
    big = window[("toxicity", json.dumps({"app": "big"}))]
    assert (big["judged"], big["traces"], big["rate"]) == (100, 1000, pytest.approx(0.01))
    small = window[("toxicity", json.dumps({"app": "small"}))]
    assert (small["judged"], small["traces"], small["rate"]) == (100, 100, 0.3)
    assert set(overall) == {"metric", "segment", "unit", "traces", "judged", "rate", "ci_low", "ci_high",
                            "corrected_rate", "corrected_ci_low", "corrected_ci_high", "labels", "corrected_note"}
    assert overall["unit"] == "traces"
    # nobody labelled: no corrected rate, and the note says why
    assert overall["corrected_rate"] is None and overall["corrected_note"].startswith("not enough labels: fail 0, pass 0")
    days = [r for r in report["days"] if r["metric"] == "toxicity" and r["segment"] == {"app": "small"}]
    assert len(days) == 3 and sum(d["judged"] for d in days) == 140
    assert all(set(d) == {"day", *overall} for d in days)

    text = CliRunner().invoke(app, ["report", "--segment", "app", "--since", "3d"]).output
    line = next(line for line in text.splitlines() if line.startswith("app=big"))
    assert "1.0% [" in line and "100 / 1000" in line
