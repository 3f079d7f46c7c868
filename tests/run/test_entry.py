"""What an entry point built, handed down (judgeflow/run/entry.py): a flow run
uses its entry point's settings, with its parameters on top, without reading
the environment again; without an entry point it builds them once."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os

import pytest

from judgeflow.run.entry import StopRequest, current_entry, entered, run_settings, run_stop
from judgeflow.errors import ConfigError
from judgeflow.config.settings import load_settings, with_parameters

BUILT = "judgeflow settings read from the environment and .env"


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    for name in [n for n in os.environ if n.startswith("JUDGEFLOW_")]:
        monkeypatch.delenv(name)
    return monkeypatch


def _builds(caplog) -> int:
    return sum(BUILT in record.getMessage() for record in caplog.records)


def test_without_an_entry_point_a_flow_run_builds_its_settings_once(clean_env, caplog):
    clean_env.setenv("JUDGEFLOW_TRACES_TABLE", "from_env")
    with caplog.at_level(logging.DEBUG, logger="judgeflow.config.settings"):
        settings = run_settings(max_concurrency=5, judge_processes=None)
    assert _builds(caplog) == 1
    assert (settings.traces_table, settings.max_concurrency, settings.judge_processes) == ("from_env", 5, None)


def test_inside_an_entry_point_a_flow_run_uses_its_settings_and_reads_nothing_again(clean_env, caplog):
    settings = load_settings(max_concurrency=4)
    clean_env.setenv("JUDGEFLOW_TRACES_TABLE", "changed_since")  # not read again
    with caplog.at_level(logging.DEBUG, logger="judgeflow.config.settings"):
        with entered(settings, judge="the judge") as entry:
            assert current_entry() is entry and entry.judge == "the judge"
            same = run_settings(max_concurrency=4, judge_processes=None)
            other = run_settings(max_concurrency=9, settle_delay="10m")
        assert current_entry() is None  # reset after the block
    assert _builds(caplog) == 0
    assert same is settings  # parameters equal to the settings: the very object
    assert (other.max_concurrency, other.settle_delay_s, other.traces_table) == (9, 600.0, "llm_traces")
    assert settings.max_concurrency == 4  # the entry's object is not changed


def test_a_parameter_is_checked_by_the_settings_rules(clean_env):
    settings = load_settings()
    with pytest.raises(ConfigError, match="max_concurrency"):
        with_parameters(settings, max_concurrency=0)
    with pytest.raises(ConfigError, match="not a duration"):
        with_parameters(settings, settle_delay="soon")
    assert with_parameters(settings, max_concurrency=None) is settings


def test_a_flow_run_and_its_tasks_see_the_entry_points_settings(clean_env, prefect_server):
    from prefect import flow, task

    @task
    def seen_by_a_task() -> int:
        return current_entry().settings.max_concurrency

    @flow
    def a_flow() -> tuple[int, int]:
        return run_settings().max_concurrency, seen_by_a_task.submit().result()

    with entered(load_settings(max_concurrency=7)):
        assert a_flow() == (7, 7)


def test_a_stop_is_asked_of_one_entrys_runs_only():
    """The stop request a run's gate reads (judgeflow/run/gate.py) is its entry's own."""
    from judgeflow.run.gate import STOPPED
    from judgeflow.run.policy import RunPolicy

    settings = load_settings()
    alone = run_stop()  # no entry (a deployment's flow run): a request of its own, never asked
    assert not alone.requested() and run_stop() is not alone
    stop = StopRequest()
    with entered(settings, stop=stop) as first:
        gate = RunPolicy(settings, "run-1", stop=run_stop())
        assert first.stop is stop and gate.why_not_claim() is None
        stop.request()  # Ctrl-C on the command
        assert gate.why_not_claim() is STOPPED and asyncio.run(gate.why_not_start()) is STOPPED
        with entered(settings):  # another entry point's runs
            assert not run_stop().requested()
        seen_by_a_task = contextvars.copy_context().run(run_stop)  # Prefect runs tasks in a copy
        assert seen_by_a_task is stop
    assert not run_stop().requested()
    with entered(settings):  # the next command starts with no stop asked
        assert not run_stop().requested()


def test_the_observer_is_the_entrys():
    from judgeflow.run.progress import RunReporter

    seen = []

    class Watcher:
        def started(self, progress):
            seen.append(("started", progress.total))

        def advanced(self, progress):
            seen.append(("advanced", progress.done))

        def finished(self, progress):
            seen.append(("finished", progress.done))

    RunReporter(3).finish()  # nobody watches a run outside an entry
    assert seen == []
    with entered(load_settings(), observer=Watcher()):
        reporter = RunReporter(2)
        reporter.finish()
    assert seen == [("started", 2), ("finished", 0)]
