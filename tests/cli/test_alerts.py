"""`judgeflow alerts --json`, and the words of its tables: a held rule, a regression's minimum rise."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from judgeflow.cli import app
from tests.alerts.helpers import add_results, migrated

runner = CliRunner()


def test_a_rule_held_by_hysteresis_says_so_and_json_holds_the_same(judgeflow_env, db, prefect_server, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", prefect_server)
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "10")
    monkeypatch.setenv("JUDGEFLOW_ALERT_PREFECT_EVENTS", "false")
    monkeypatch.setenv("JUDGEFLOW_TOXICITY_REGRESSION_MIN_INCREASE", "0.05")
    engine = migrated(db)
    add_results(engine, passed=8, not_passed=4)  # 33%: fires over toxicity's 5%
    assert runner.invoke(app, ["alerts", "check"]).exit_code == 0
    add_results(engine, passed=70)  # 4 of 82: 4.9%, below 5% but above the 4.5% it resolves at
    checked = runner.invoke(app, ["alerts", "check"])
    assert checked.exit_code == 0, checked.output
    line = next(line for line in checked.stdout.splitlines() if line.startswith("toxicity_rate "))
    assert "FIRING (held by hysteresis until at or below 4.5%)" in line and "max 5.0%" in line

    listing = runner.invoke(app, ["alerts"])
    current = next(line for line in listing.stdout.splitlines() if line.startswith("toxicity_rate "))
    assert "FIRING (held by hysteresis until at or below 4.5%)" in current
    regression = next(line for line in listing.stdout.splitlines() if line.startswith("toxicity_regression "))
    assert "min rise +5.0%" in regression and "max" not in regression

    # `score` with nothing to do: one line of what the rules found (no table), the held rule said as held
    from tests.support.traces import create_source

    create_source(db)  # the source, empty: nothing pending
    idle = runner.invoke(app, ["score"])
    assert idle.exit_code == 0, idle.output
    assert "nothing to score" in idle.stdout and "| rule |" not in idle.stdout and "rule  " not in idle.stdout
    [evaluated] = [line for line in idle.stdout.splitlines() if line.startswith("alert rules evaluated")]
    assert "toxicity_rate (4.9%, max 5.0%, held by hysteresis until at or below 4.5%)" in evaluated, evaluated

    data = json.loads(runner.invoke(app, ["alerts", "--json"]).stdout)
    rules = {r["rule"]: r for r in data["rules"]}
    tox = rules["toxicity_rate"]
    assert (tox["state"], tox["kind"], tox["maximum"], tox["evaluated"]) == ("firing", "not_passed_rate", 0.05, True)
    assert round(tox["value"], 4) == round(4 / 82, 4) and tox["sample_size"] == 82
    assert (rules["toxicity_regression"]["kind"], rules["toxicity_regression"]["min_increase"]) == ("regression", 0.05)
    assert rules["hallucination_rate"]["state"] in ("ok", "disabled")
    [fired] = data["history"]
    assert (fired["rule"], fired["kind"]) == ("toxicity_rate", "fired")
    assert fired["occurred_at"].endswith("+00:00")  # ISO 8601 with its offset
