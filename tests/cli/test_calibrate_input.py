"""`judgeflow calibrate` on bad input, and its cost question and budget: the
real CLI (a subprocess for the one-line errors, typer's runner for the rest)
over HTTP to the local judge server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from judgeflow.cli import app

runner = CliRunner()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "judgeflow", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)


@pytest.mark.parametrize("content, reason", [
    (b'{"output": "caf\xe9", "labels": {"toxicity": false}}\n', "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
])
def test_a_file_that_cannot_be_read_is_one_line_and_exit_2(judgeflow_env, tmp_path, content, reason):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    done = _cli("calibrate", str(path), "--yes")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0] and "bad.jsonl" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def _labelled(tmp_path, n: int):
    path = tmp_path / "set.jsonl"
    path.write_text("".join(
        json.dumps({"id": f"i{i}", "output": f"You fool number {i} [toxic].", "labels": {"toxicity": "toxic"}}) + "\n"
        for i in range(n)))
    return path


@pytest.fixture
def priced(monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", "1000")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", "1000")


def test_calibrate_shows_the_cost_and_asks_first(judgeflow_env, judge_server, priced, tmp_path):
    path = _labelled(tmp_path, 3)
    before = judge_server.calls()
    asked = runner.invoke(app, ["calibrate", str(path)], input="n\n")
    assert asked.exit_code == 1, asked.output
    assert "3 (item, metric) pair(s) to judge with openai/judge-test; estimated cost $" in asked.output
    assert "Start the calibration?" in asked.output and "aborted; nothing was judged" in asked.output
    assert "items labelled" not in asked.output
    assert judge_server.calls() == before

    yes = runner.invoke(app, ["calibrate", str(path)], input="y\n")
    assert yes.exit_code == 0, yes.output
    assert "items labelled: 3; judged: 3" in yes.output


def test_calibrate_stops_judging_at_its_budget(judgeflow_env, judge_server, priced, tmp_path):
    from judgeflow.calibration.labelled import load_labelled
    from judgeflow.calibration.plan import plan_calibration
    from judgeflow.config.settings import load_settings

    path = _labelled(tmp_path, 6)
    plan = plan_calibration(load_settings(), load_labelled(path))
    one = plan.cost_usd / 6
    budget = one * 2.5  # room for two pairs at their estimate
    done = runner.invoke(app, ["calibrate", str(path), "--yes", "--budget-usd", f"{budget:.9f}"])
    assert done.exit_code == 0, done.output
    assert "items labelled: 6; judged: 2" in done.output
    assert "4 not judged: the budget" in done.output


def test_a_budget_needs_prices(judgeflow_env, tmp_path):
    done = runner.invoke(app, ["calibrate", str(_labelled(tmp_path, 1)), "--yes", "--budget-usd", "1"])
    assert done.exit_code == 2
    assert "litellm has no price" in done.output
