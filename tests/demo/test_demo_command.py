"""The README's main-job command, end to end, against the offline judge: the
summary it prints must match what is in the database."""

from __future__ import annotations

import base64
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa

from judgeflow.db.embedded import EmbeddedPostgres
from judgeflow.infra.prefect_server import LocalPrefectServer
from tests.support.processes import kill_processes_under

REPO = Path(__file__).resolve().parents[2]


def _run_demo(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUDGEFLOW_", "PREFECT_"))}
    env["JUDGEFLOW_HOME"] = str(home)
    proc = subprocess.run(
        [str(REPO / "scripts" / "demo"), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _stop_once_healthy(hog: subprocess.Popen, prefect: LocalPrefectServer) -> None:
    """Kill ``hog`` once ``prefect`` answers its health check (or the hog is gone)."""
    while hog.poll() is None and not prefect.is_healthy():
        time.sleep(0.5)
    hog.kill()


def _figures(summary: str) -> dict[str, dict[str, float]]:
    out = {}
    for metric in ("toxicity", "hallucination"):
        m = re.search(
            rf"^{metric}\s+scored\s+(\d+)\s+failed\s+(\d+)\s+skipped\s+(\d+)\s+failing rate ([\d.]+)%", summary, re.M
        )
        assert m, summary
        out[metric] = {"scored": int(m[1]), "failed": int(m[2]), "skipped": int(m[3]), "rate": float(m[4]) / 100}
    return out


def test_demo_command_scores_everything_fires_the_alert_and_reports_the_database_figures():
    # not under pytest's tmp_path: another pytest session resets /tmp/pytest-of-<user>
    # to 0700 when it starts, and the database server account (postgres, when the
    # suite runs as root) then loses its way to the data directory
    top = Path(tempfile.mkdtemp(prefix="judgeflow-test-demo-"))
    home = top / "home"
    server = EmbeddedPostgres(home / "pg", database="judgeflow_demo")  # the demo's own database
    prefect = LocalPrefectServer(home)
    # a busy machine: one core kept busy by a CPU hog while the demo starts its
    # database and Prefect server (start-ups must wait, not time out); stopped once
    # the server answers, so that the scoring does not take a core from the suite's
    # other workers for a minute
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    threading.Thread(target=_stop_once_healthy, args=(hog, prefect), daemon=True).start()
    try:
        try:
            first_run = _run_demo(home)
        finally:
            hog.kill()
            hog.wait()
        first = first_run.stdout
        figures = _figures(first)
        engine = sa.create_engine(server.url)
        with engine.connect() as conn:
            traces = conn.execute(sa.text("SELECT count(*) FROM llm_traces")).scalar_one()
            rows = conn.execute(
                sa.text(
                    "SELECT metric, status, count(*), avg(CASE WHEN passed THEN 0.0 ELSE 1.0 END) "
                    "FROM judgeflow.eval_results GROUP BY metric, status"
                )
            ).all()
            models = {m for (m,) in conn.execute(sa.text("SELECT DISTINCT judge_model FROM judgeflow.eval_results"))}
            alert = conn.execute(
                sa.text("SELECT state, value, sample_size FROM judgeflow.alerts WHERE rule = 'toxicity_rate'")
            ).one()
            scored_at = conn.execute(sa.text("SELECT max(scored_at) FROM judgeflow.eval_results")).scalar_one()
        engine.dispose()

        assert traces >= 300
        db = {(metric, status): (n, rate) for metric, status, n, rate in rows}
        for metric in ("toxicity", "hallucination"):
            assert figures[metric]["scored"] == db.get((metric, "scored"), (0, 0))[0]
            assert figures[metric]["failed"] == db.get((metric, "failed"), (0, 0))[0]
            assert figures[metric]["skipped"] == db.get((metric, "skipped"), (0, 0))[0]
            assert abs(figures[metric]["rate"] - float(db[(metric, "scored")][1])) < 0.001
            assert figures[metric]["scored"] + figures[metric]["skipped"] + figures[metric]["failed"] == traces
        assert figures["toxicity"]["scored"] == traces  # every trace got a toxicity score
        # the file metric beside them: the offline judge has no rubric, so every trace is skipped, with the reason
        assert db[("helpfulness", "skipped")][0] == traces and ("helpfulness", "failed") not in db
        assert re.search(rf"^helpfulness\s+scored\s+0\s+failed\s+0\s+skipped\s+{traces}\s", first, re.M), first
        assert (" skipped: the offline judge has no rubric for the G-Eval metric helpfulness: it is not scored "
                "offline") in first
        assert models and all(m.startswith("offline/") for m in models)
        assert alert.state == "firing"
        assert f"alert toxicity_rate: FIRING  (rate {alert.value:.1%} over {alert.sample_size} traces" in first
        # the dead-delivery rule counts deliveries, not traces
        assert re.search(r"^alert dead_delivery_rate: \w+  \(rate \S+ over \d+ deliveries in the window", first, re.M), first
        # the psql line it prints logs in as it is
        assert "  browse:  JUDGEFLOW_EMBEDDED_DATABASE=judgeflow_demo .venv/bin/judgeflow status\n" in first, first
        psql_line = re.search(r"^  psql:    (PGPASSFILE=(\S+) psql (\S+))$", first, re.M)
        assert psql_line and "***" not in psql_line[1], first
        from judgeflow.db.embedded import find_pg_bin

        logged_in = subprocess.run([str(find_pg_bin() / "psql"), "--no-psqlrc", "-At", psql_line[3], "-c",
                                    "SELECT count(*) FROM llm_traces"], env={**os.environ, "PGPASSFILE": psql_line[2]},
                                   capture_output=True, text=True, timeout=60)
        assert logged_in.returncode == 0 and logged_in.stdout.strip() == str(traces), logged_in.stderr
        assert len(re.findall(r"^  demo-\d{4}\s", first, re.M)) == 5
        assert "offline" in first
        # the link to the run works right away: the local server is still running
        link = re.search(r"^this run in the Prefect UI: (http://127\.0\.0\.1:(\d+))/runs/flow-run/([0-9a-f-]{36})$",
                         first, re.M)
        assert link and link[1] == prefect.ui_url, first
        # the local server wants its auth string (judgeflow/infra/prefect_server.py): without it, 401
        api = f"{prefect.api_url}/flow_runs/{link[3]}"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(api, timeout=10)
        assert refused.value.code == 401
        basic = base64.b64encode(prefect.auth_string().encode()).decode()
        with urllib.request.urlopen(urllib.request.Request(api, headers={"Authorization": f"Basic {basic}"}),
                                    timeout=10) as response:
            assert response.status == 200
        page = urllib.request.Request(f"{link[1]}/runs/flow-run/{link[3]}", headers={"Accept": "text/html"})
        with urllib.request.urlopen(page, timeout=10) as response:  # the UI's page, as a browser asks for it
            assert response.status == 200 and b"<html" in response.read().lower()
        assert f"demo: {traces} new demo traces loaded" in first_run.stderr, first_run.stderr[:2000]
        assert "Traceback" not in first_run.stderr, first_run.stderr[-3000:]
        with sqlite3.connect(home / "prefect" / "prefect.db") as prefect_db:
            recorded = dict(prefect_db.execute("SELECT state_type, count(*) FROM task_run GROUP BY 1").fetchall())
        # the default fan-out's task runs, as the README states them: claim-traces and
        # score-batch per batch of 100 pairs, one more claim-traces, thirteen once per run (record-judge-epochs,
        # plan-source-reads, find-quiet-sessions and advance-watermark among them, as
        # tests/flows/test_scoring_flow.py counts them; the demo's traces are in no session)
        # three metrics: the built-ins and the demo's file metric (judgeflow/demo/metrics.toml)
        assert set(recorded) == {"COMPLETED"} and recorded["COMPLETED"] == 2 * math.ceil(3 * traces / 100) + 13

        # idempotent: nothing re-scored, same figures
        second_run = _run_demo(home)
        second = second_run.stdout
        # it used to say 326 again
        assert "demo: 0 new demo traces loaded" in second_run.stderr, second_run.stderr[:2000]
        assert _figures(second) == figures
        engine = sa.create_engine(server.url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT max(scored_at) FROM judgeflow.eval_results")).scalar_one() == scored_at
        engine.dispose()
    finally:
        prefect.stop()
        server.destroy()
        left = kill_processes_under(top)
        shutil.rmtree(top, ignore_errors=True)
    assert left == []


def test_the_demo_passes_its_settings_down_and_leaves_the_environment_alone(prefect_server, judge_server,
                                                                            monkeypatch, caplog, tmp_path):
    """`judgeflow demo`, in this process: its run uses the demo's embedded
    database and offline judge although JUDGEFLOW_DATABASE_URL points
    elsewhere (they are handed to the flow, not written into the
    environment), the JUDGEFLOW_ variables are as they were, and the settings
    were read from the environment once. Then the user's own metric named as
    the demo's (`helpfulness`) scores the user's traces in the same embedded
    cluster: the demo's results live in the demo's own database."""
    import logging

    from typer.testing import CliRunner

    from judgeflow.cli import app
    from judgeflow.db.engine import dispose_engines

    top = Path(tempfile.mkdtemp(prefix="judgeflow-test-demo-env-"))  # not tmp_path: see the test above
    home = top / "home"
    monkeypatch.chdir(top)  # no stray .env
    monkeypatch.setenv("JUDGEFLOW_HOME", str(home))
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", "postgresql://nobody@127.0.0.1:9/not-the-demos")
    monkeypatch.delenv("JUDGEFLOW_JUDGE_MODEL", raising=False)
    before = {k: v for k, v in os.environ.items() if k.startswith("JUDGEFLOW_")}
    server = EmbeddedPostgres(home / "pg", database="judgeflow_demo")
    try:
        with caplog.at_level(logging.DEBUG, logger="judgeflow.config.settings"):
            result = CliRunner().invoke(app, ["demo"])
        assert result.exit_code == 0, result.output
        assert {k: v for k, v in os.environ.items() if k.startswith("JUDGEFLOW_")} == before
        assert sum("judgeflow settings read from the environment" in r.getMessage() for r in caplog.records) == 1
        engine = sa.create_engine(server.url)
        with engine.connect() as conn:
            traces = conn.execute(sa.text("SELECT count(*) FROM llm_traces")).scalar_one()
            models = set(conn.execute(sa.text("SELECT DISTINCT judge_model FROM judgeflow.eval_results")).scalars())
            scored = conn.execute(sa.text("SELECT count(*) FROM judgeflow.eval_results WHERE metric = 'toxicity'"))
        engine.dispose()
        assert traces >= 300 and scored.scalar_one() == traces
        assert models and all(m.startswith("offline/") for m in models)
        _the_users_helpfulness_scores_its_own_traces(home, judge_server, monkeypatch, tmp_path)
    finally:
        dispose_engines()
        server.destroy()
        left = kill_processes_under(top)
        shutil.rmtree(top, ignore_errors=True)
    assert left == []


def _the_users_helpfulness_scores_its_own_traces(home: Path, judge_server, monkeypatch, tmp_path: Path) -> None:
    """After the demo: the user's embedded database (the same cluster, the default database) with a metrics
    file of their own declaring `helpfulness`, as the demo's does; `judgeflow score` judges their traces
    and `judgeflow status` names no variable they never set."""
    from typer.testing import CliRunner

    from judgeflow.cli import app
    from judgeflow.db.engine import dispose_engines
    from judgeflow.sources.table import CREATE_DEFAULT_TABLE

    metrics = tmp_path / "my-metrics.toml"
    metrics.write_text('[metrics.helpfulness]\ncriteria = "The reply answers the question."\n'
                       'inputs = ["input", "output"]\n')
    for name, value in {"JUDGEFLOW_METRICS_FILE": str(metrics), "JUDGEFLOW_JUDGE_MODEL": "openai/judge-test",
                        "JUDGEFLOW_JUDGE_API_BASE": judge_server.url, "JUDGEFLOW_JUDGE_API_KEY": "test-key-not-secret",
                        "JUDGEFLOW_JUDGE_PROCESSES": "1", "JUDGEFLOW_SETTLE_DELAY": "0s"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("JUDGEFLOW_DATABASE_URL")
    mine = EmbeddedPostgres(home / "pg")  # the user's database: JUDGEFLOW_EMBEDDED_DATABASE's default
    mine.start()
    engine = sa.create_engine(mine.url)
    with engine.begin() as conn:
        conn.exec_driver_sql(CREATE_DEFAULT_TABLE)
        conn.execute(sa.text("INSERT INTO llm_traces (id, created_at, input, output) VALUES "
                             "('mine-1', now() - interval '1 hour', 'How do I reset it?', 'Hold the dial 10 s.'), "
                             "('mine-2', now() - interval '1 hour', 'Is it on sale?', 'Yes, until Friday.')"))
    try:
        asked = judge_server.calls("GEvalScore")
        result = CliRunner().invoke(app, ["score", "--metric", "helpfulness"])
        assert result.exit_code == 0, result.output
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT trace_id, status FROM judgeflow.eval_results "
                                        "WHERE metric = 'helpfulness' ORDER BY 1")).all()
        assert [tuple(r) for r in rows] == [("mine-1", "scored"), ("mine-2", "scored")]
        assert judge_server.calls("GEvalScore") - asked == 2  # the user's two traces, judged
        with engine.connect() as conn:  # nothing of the demo's in the user's database
            assert conn.execute(sa.text("SELECT count(*) FROM llm_traces")).scalar_one() == 2
            assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.eval_results "
                                        "WHERE trace_id NOT LIKE 'mine-%'")).scalar_one() == 0
        status = CliRunner().invoke(app, ["status"])
        assert status.exit_code == 0, status.output
        assert "JUDGEFLOW_METRICS_FILE" not in status.output and "not scored now" not in status.output
        # `judgeflow demo --reset` drops the demo's database alone: the user's results stay
        from judgeflow.demo.run import reset
        from judgeflow.run.metric_door import entry_settings

        reset(entry_settings(embedded_database="judgeflow_demo"))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.eval_results")).scalar_one() == 2
            assert conn.execute(sa.text("SELECT count(*) FROM pg_database WHERE datname = 'judgeflow_demo'")
                                ).scalar_one() == 0
    finally:
        engine.dispose()
        dispose_engines()
