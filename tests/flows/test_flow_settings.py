"""A flow run's settings: its entry point's (judgeflow.entry) with the run's
parameters on top, built once; or, for a flow run that is its own entry
point, built from the environment."""

from __future__ import annotations

import pytest

from judgeflow.entry import entered
from judgeflow.errors import ConfigError
from judgeflow.flows.scoring import flow_settings
from judgeflow.settings import load_settings


def test_a_flow_run_uses_its_entry_points_settings_with_its_parameters_on_top(judgeflow_env, monkeypatch):
    settings = load_settings()
    with entered(settings):
        assert flow_settings() is settings  # nothing to change: the very object, not a rebuild
        monkeypatch.setenv("JUDGEFLOW_JUDGE_TIMEOUT_S", "7")  # the environment is not read again
        run = flow_settings(max_concurrency=3, judge_processes=None, settle_delay="10m")
        with pytest.raises(ConfigError):
            flow_settings(max_concurrency=0)
    assert (run.max_concurrency, run.settle_delay_s, run.judge_timeout_s) == (3, 600.0, settings.judge_timeout_s)
    assert run.judge_api_key.get_secret_value() == settings.judge_api_key.get_secret_value()
    assert run.judge_api_base.get_secret_value() == settings.judge_api_base.get_secret_value()


def test_a_flow_run_without_an_entry_point_builds_its_own(judgeflow_env, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_JUDGE_TIMEOUT_S", "7")
    assert flow_settings(max_concurrency=5).judge_timeout_s == 7 and flow_settings(max_concurrency=5).max_concurrency == 5
