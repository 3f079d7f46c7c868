"""`judgeflow alerts` names the segment keys in force and where they come from."""

from __future__ import annotations

from typer.testing import CliRunner

from judgeflow.cli.alerts import segment_keys_in_force
from judgeflow.config.settings import Settings


def test_the_keys_and_their_origin():
    assert segment_keys_in_force(Settings(_env_file=None, source="phoenix")) == (
        "by project: the phoenix preset's default (JUDGEFLOW_ALERT_SEGMENT_BY is not set)")
    assert segment_keys_in_force(Settings(_env_file=None, source="phoenix", alert_segment_by="app,model")) == (
        "by app, model: JUDGEFLOW_ALERT_SEGMENT_BY")
    assert segment_keys_in_force(Settings(_env_file=None)).startswith("none in force now")


def test_alerts_prints_the_presets_keys_before_any_evaluation(judgeflow_env, db, monkeypatch):
    from judgeflow.cli import app

    monkeypatch.setenv("JUDGEFLOW_SOURCE", "phoenix")
    result = CliRunner().invoke(app, ["alerts"])
    assert result.exit_code == 0, result.output
    assert ("Segments (by project: the phoenix preset's default (JUDGEFLOW_ALERT_SEGMENT_BY is not set)): "
            "none evaluated yet") in result.stdout
    assert "is not set now" not in result.stdout
