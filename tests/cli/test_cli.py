"""The CLI's own behaviour: clear errors, db check, backfill's estimate and confirmation."""

from __future__ import annotations

import gc

import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.cli import app
from tests.support.traces import BASE_TIME, insert_traces, scripted_trace

runner = CliRunner()


def test_a_refused_table_name_is_one_clear_line_and_exit_code_2(judgeflow_env, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_TRACES_TABLE", "x; drop table y")
    result = runner.invoke(app, ["db", "check"])
    assert result.exit_code == 2
    assert "JUDGEFLOW_TRACES_TABLE" in result.output
    # the line points to the page that explains the settings
    (line,) = [line for line in result.output.splitlines() if "JUDGEFLOW_TRACES_TABLE" in line]
    assert line.startswith("judgeflow: ") and line.endswith("(see docs/settings.md)")


def test_db_check_reports_a_missing_index_and_schema(judgeflow_env, db):
    with db.begin() as conn:
        conn.execute(sa.text("DROP SCHEMA judgeflow CASCADE"))  # a database judgeflow never migrated
        conn.execute(sa.text("CREATE TABLE llm_traces (id text, created_at timestamptz, output text)"))
    result = runner.invoke(app, ["db", "check"])
    assert result.exit_code == 1
    assert "[MISSING] index on llm_traces(created_at)" in result.output
    assert "run `judgeflow db upgrade`" in result.output
    with db.begin() as conn:
        conn.execute(sa.text("CREATE INDEX ON llm_traces (created_at)"))
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    result = runner.invoke(app, ["db", "check"])
    assert result.exit_code == 0, result.output
    assert "[ok] index on llm_traces(created_at)" in result.output


def test_database_password_never_printed(judgeflow_env, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", "postgresql://judgeflow:hunter2secret@127.0.0.1:1/none")
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 2
    assert "hunter2secret" not in result.output
    assert "***" in result.output
    assert "(see docs/running.md)" in result.output


def test_backfill_estimates_then_asks_and_aborts_without_yes(judgeflow_env, db, prefect_server):
    insert_traces(db, [scripted_trace(i)[0] for i in range(10)])
    result = runner.invoke(
        app, ["backfill", "--since", BASE_TIME.isoformat(), "--until", "0s"], input="n\n"
    )
    assert result.exit_code == 1
    assert "10 traces to score (toxicity: 10, hallucination: 10)" in result.output
    assert "estimated cost unknown" in result.output
    assert "aborted" in result.output
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.eval_results")).scalar_one() == 0


def test_backfill_with_rescore_rescored_everything_in_range(judgeflow_env, db, prefect_server, judge_server):
    insert_traces(db, [scripted_trace(i)[0] for i in range(6)])
    frozen, thresholds = gc.get_freeze_count(), gc.get_threshold()
    assert runner.invoke(app, ["score", "--no-alerts"]).exit_code == 0
    # called in this (the test's) process, the command leaves its garbage collector alone
    assert (gc.get_freeze_count(), gc.get_threshold()) == (frozen, thresholds)
    with db.connect() as conn:
        before = dict(conn.execute(sa.text("SELECT trace_id || metric, scored_at FROM judgeflow.eval_results")).all())
    calls = judge_server.calls()

    result = runner.invoke(
        app, ["backfill", "--since", BASE_TIME.isoformat(), "--until", "0s", "--rescore", "--yes"]
    )
    assert result.exit_code == 0, result.output
    assert "6 traces to score" in result.output
    with db.connect() as conn:
        after = dict(conn.execute(sa.text("SELECT trace_id || metric, scored_at FROM judgeflow.eval_results")).all())
    assert after.keys() == before.keys() and all(after[k] > before[k] for k in before)
    assert judge_server.calls() == 2 * calls  # every pair judged exactly once more

    # without --rescore nothing is left to do
    result = runner.invoke(app, ["backfill", "--since", BASE_TIME.isoformat(), "--until", "0s", "--yes"])
    assert result.exit_code == 0 and "0 traces to score" in result.output


def test_backfill_estimate_uses_the_cost_model(judgeflow_env, db, monkeypatch):
    from judgeflow.metrics.registry import registered

    insert_traces(db, [{"id": f"t{i}", "input": "q" * 40, "output": "a" * 400, "context": None} for i in range(10)])
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", "1000")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", "2000")
    result = runner.invoke(app, ["backfill", "--since", BASE_TIME.isoformat(), "--until", "0s"], input="n\n")
    assert result.exit_code == 1
    # per trace, toxicity: (5700 + 40 + 2*400)/4 prompt, 120 + 400/4 completion tokens;
    # hallucination: (2050 + 40 + 400)/4 prompt, 60 completion
    assert {name: spec.cost.prompt_overhead_chars for name, spec in registered().items()} == {
        "toxicity": 5700, "hallucination": 2050}
    prompt = 10 * ((5700 + 40 + 800) / 4 + (2050 + 40 + 400) / 4)
    completion = 10 * (120 + 100 + 60)
    expected = (prompt * 1000 + completion * 2000) / 1e6
    assert f"estimated cost ${expected:,.4f}" in result.output
    assert "JUDGEFLOW_JUDGE_INPUT/OUTPUT_COST_PER_MTOK" in result.output


def test_status_shows_in_progress_runs_and_stranded_pairs(judgeflow_env, db):
    import json

    from judgeflow.db import migrate
    from judgeflow.config.settings import load_settings
    from judgeflow.db.leases import LeaseKeeper
    from judgeflow.tasks.claims import claim_traces

    insert_traces(db, [scripted_trace(i)[0] for i in range(6)])
    migrate.upgrade(db)
    settings = load_settings()
    with LeaseKeeper(settings, "run-live:1") as keeper:
        claim_traces.fn(settings, "run-live:1", ["toxicity"], 2, owner_key=keeper.owner_key)
        claim_traces.fn(settings, "run-gone:1", ["toxicity"], 1, owner_key=5)  # nobody holds key 5
        with db.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed) "
                "VALUES ('tr-0005', 'toxicity', 'scored', 0, true), ('tr-0004', 'toxicity', 'failed', NULL, NULL)"
            ))
        report = json.loads(runner.invoke(app, ["status", "--json"]).stdout)
        text = runner.invoke(app, ["status"]).stdout

    tox = report["metrics"]["toxicity"]
    assert {k: tox[k] for k in ("scored", "passed", "failed", "pending", "in_progress", "stranded")} == {
        "scored": 1, "passed": 1, "failed": 1, "pending": 3, "in_progress": 2, "stranded": 1,
    }
    assert tox["pending"] + tox["in_progress"] == 5  # six traces, one done
    assert report["metrics"]["hallucination"]["pending"] == 6
    live, gone = report["runs"]
    assert (live["flow_run_id"], live["live"], live["pairs"]) == ("run-live", True, {"toxicity": 2})
    assert (gone["flow_run_id"], gone["live"], gone["pairs"]) == ("run-gone", False, {"toxicity": 1})
    assert "flow run run-live: toxicity 2 (in progress, lease until" in text
    assert "flow run run-gone: toxicity 1 (stranded" in text


def test_every_error_type_points_to_a_planned_docs_page():
    """Each JudgeflowError subclass resolves to one of the docs pages (the
    most specific mapping wins: an abstention is the offline judge's page)."""
    from judgeflow import errors
    from judgeflow.cli.errors import docs_page, error_line

    planned = {"docs/metrics.md", "docs/tables.md", "docs/running.md", "docs/alerts.md",
               "docs/offline-judge.md", "docs/deployment.md", "docs/benchmark.md", "docs/settings.md"}
    seen, todo = [], [errors.JudgeflowError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls is not errors.JudgeflowError and cls.__module__ == errors.__name__:
            seen.append(cls)
    assert len(seen) >= 8
    for cls in seen:
        error = cls.__new__(cls)
        Exception.__init__(error, "boom")
        assert docs_page(error) in planned, cls
    assert docs_page(errors.ConfigError("x")) == "docs/settings.md"
    assert docs_page(errors.DatabaseError("x")) == "docs/running.md"
    assert docs_page(errors.PrefectServerError("x")) == "docs/running.md"
    assert docs_page(errors.TransientJudgeError("x")) == "docs/metrics.md"
    assert docs_page(errors.JudgeAbstained("x")) == "docs/offline-judge.md"
    assert error_line(errors.InvalidTraceError("null output")) == "judgeflow: null output (see docs/tables.md)"


def test_every_page_an_error_points_to_exists():
    from pathlib import Path

    from judgeflow.cli.errors import DOCS_PAGES

    repo = Path(__file__).resolve().parents[2]
    for page in set(DOCS_PAGES.values()):
        assert (repo / page).is_file(), page


# A `judgeflow score` as users run it, in its own process: which modules the run's
# process holds when its judge workers start, and after the run.
_SCORE_AND_REPORT = """
import json, os, sys
import judgeflow.judge.pool.process_pool as process_pool
seen = {}
pools = []
_start = process_pool.JudgeProcessPool.start
_close = process_pool.JudgeProcessPool.close
def start(self):
    seen.setdefault("prefect_imported_when_workers_started", "prefect" in sys.modules)
    seen["processes"] = self.processes
    pools.append(self)
    return _start(self)
def ancestors(pid):
    chain = []
    while pid > 1:
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        chain.append(pid)
    return chain
def close(self):  # the command closes the judge it started once the run is over
    pids = [p for p in self.worker_pids() if p]
    seen.setdefault("workers_descend_from_the_run", all(os.getpid() in ancestors(p) for p in pids))
    seen.setdefault("workers", len(pids))
    return _close(self)
process_pool.JudgeProcessPool.start = start
process_pool.JudgeProcessPool.close = close
from judgeflow.cli import app
try:
    app(["score", "--no-alerts"], standalone_mode=False)
finally:
    (pool,) = pools  # one judge for the command and its run
    seen["calls_per_worker"] = pool.calls_per_worker()
    seen["litellm_imported_by_the_run"] = "litellm" in sys.modules
    seen["closed_after_the_run"] = pool.worker_pids() == [None] * pool.processes
    print("REPORT " + json.dumps(seen), flush=True)
"""


def test_score_by_default_judges_in_worker_processes_started_before_prefect(
    judgeflow_env, db, prefect_server, judge_server
):
    import json
    import os
    import subprocess
    import sys

    from judgeflow.judge.config import MAX_DEFAULT_JUDGE_PROCESSES, usable_cores
    from tests.support.traces import first_step_calls, results

    expected = min(MAX_DEFAULT_JUDGE_PROCESSES, usable_cores())
    if expected < 2:
        import pytest

        pytest.skip("one usable core: the default keeps the judge calls in the run's process")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env.update({k: v for k, v in judgeflow_env.items() if k != "JUDGEFLOW_JUDGE_PROCESSES"}, PREFECT_API_URL=prefect_server)

    insert_traces(db, [scripted_trace(i)[0] for i in range(30)])
    done = subprocess.run([sys.executable, "-c", _SCORE_AND_REPORT], env=env, cwd=os.getcwd(),
                          capture_output=True, text=True, timeout=300)
    report_lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and report_lines, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    report = json.loads(report_lines[0][len("REPORT "):])

    assert report["processes"] == expected and report["workers"] == expected
    assert report["workers_descend_from_the_run"] is True  # started by the run, nothing else
    assert report["prefect_imported_when_workers_started"] is False  # litellm's import overlapped Prefect's start
    assert report["litellm_imported_by_the_run"] is False
    assert report["closed_after_the_run"] is True
    assert all(n > 0 for n in report["calls_per_worker"]), report  # every worker took calls
    assert sum(report["calls_per_worker"]) == judge_server.calls()
    assert len(results(db)) == 60 and {r["status"] for r in results(db).values()} == {"scored"}
    assert set(first_step_calls(judge_server).values()) == {1}  # each (trace, metric) reached the judge once


def test_score_in_the_runs_process_exits_without_noise(judgeflow_env, db, prefect_server, judge_server):
    """judge_processes = 1: the judge calls, their HTTP clients and Prefect's
    task runs all live in the CLI's process; its exit prints no traceback, no
    unclosed-session warning and no failed log delivery."""
    import os
    import subprocess
    import sys

    from tests.support.traces import results

    env = dict(os.environ, PREFECT_API_URL=prefect_server)
    insert_traces(db, [scripted_trace(i)[0] for i in range(40)])
    done = subprocess.run([sys.executable, "-m", "judgeflow.cli", "score", "--no-alerts"], env=env, cwd=os.getcwd(),
                          capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert len(results(db)) == 80 and {r["status"] for r in results(db).values()} == {"scored"}
    for noise in ("Traceback", "Unclosed", "Error logging to API", "was destroyed but it is pending"):
        assert noise not in out, out[-3000:]


# --- settings: built once per command ------------------------------------------------

SETTINGS_BUILT = "judgeflow settings read from the environment and .env"
SECRET_READ = "read from the Prefect Secret block"


def _count(caplog, text: str) -> int:
    return sum(text in record.getMessage() for record in caplog.records)


def test_score_builds_its_settings_once_and_reads_a_secret_block_once(
    judgeflow_env, db, prefect_server, judge_server, monkeypatch, caplog
):
    """One `judgeflow score` (the command, its early judge and its flow run) reads
    the environment once and asks Prefect for a referenced Secret block once;
    the command's options apply to that one object."""
    import logging

    from prefect.blocks.system import Secret

    from tests.support.traces import results

    Secret(value=judgeflow_env["JUDGEFLOW_JUDGE_API_KEY"]).save("judgeflow-test-judge-key", overwrite=True)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_API_KEY", "prefect-secret://judgeflow-test-judge-key")
    insert_traces(db, [scripted_trace(i)[0] for i in range(6)])
    with caplog.at_level(logging.DEBUG, logger="judgeflow"):
        result = runner.invoke(app, ["score", "--no-alerts", "--max-concurrency", "3", "--settle-delay", "0s"])
    assert result.exit_code == 0, result.output
    assert len(results(db)) == 12 and judge_server.calls() > 0  # the run scored, with the block's key
    assert _count(caplog, SETTINGS_BUILT) == 1
    assert _count(caplog, SECRET_READ) == 1


def test_an_invalid_option_is_refused_before_any_run_naming_the_setting(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no stray .env
    result = runner.invoke(app, ["score", "--max-concurrency", "0"])
    assert result.exit_code == 2
    assert result.output.startswith("judgeflow: invalid judgeflow settings")  # before any database or run
    assert "max_concurrency" in result.output and "greater than or equal to 1" in result.output
    assert result.output.rstrip().endswith("(see docs/settings.md)")
