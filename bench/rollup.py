"""Alerts, status and report as the results grow (issue 50):

    .venv/bin/python -m bench.rollup [--sizes 2000,200000,2000000,16000000] [--runs 3]

A real ``judgeflow score`` (local judge server, answering at once) scores
1,000 synthetic traces: 2,000 real result rows (reasons, details, tokens,
costs as a run writes them). The results table is then grown to each size
with ``INSERT ... SELECT`` copies of those rows, ``generate_series`` at a time
(500k rows per statement, the rollup kept by its trigger as in production),
spread evenly over the last 8 days, segments app x model (20 x 5), regression
rules on. At each size, medians of ``--runs``:

* ``judgeflow alerts check``, ``judgeflow status``, ``judgeflow report``: the
  whole command as a fresh process;
* the alert and trend work of a run (``evaluate_rules`` and ``compute_trend``
  with its rendering, in-process: what the run's two tasks do), and a whole
  ``judgeflow score`` of 10 new traces with its alerts and trend;
* the alert and trend tasks of those ``score`` runs themselves (their task
  runs' durations, read back from the Prefect server);
* the rollup's size (lines, MB) and the results table's.

``--fast-build`` grows the table as a bulk load does: the results table
UNLOGGED and without its indexes and key while rows are copied (its triggers
stay on, so the rollup and the counts are kept as in production), then the key
and indexes are built again. The table stays UNLOGGED for the measurement: reads
are the same, and the benchmark's cluster is thrown away at the end.
``--explain`` runs ``judgeflow alerts check`` once more at each size with
``auto_explain`` (ANALYZE, BUFFERS) and prints the plan of every statement
that reads the rollup or the results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import time
from datetime import datetime, timedelta, timezone

import psycopg

from bench.harness import PY, JudgeProcess, Stack, http_json, load_traces

SEED = 1000  # traces scored for real: 2,000 result rows
CHUNK = 500_000
SEGMENTS = {"JUDGEFLOW_ALERT_SEGMENT_BY": "app,model", "JUDGEFLOW_TOXICITY_REGRESSION_MIN_INCREASE": "0.02",
            "JUDGEFLOW_HALLUCINATION_REGRESSION_MIN_INCREASE": "0.02", "JUDGEFLOW_ALERT_PREFECT_EVENTS": "false"}
_COLUMNS = ("metric, metric_version, status, score, passed, threshold, reason, details, judge_model, prompt_tokens, "
            "completion_tokens, cost_usd, latency_ms, judge_calls, error, error_kind, attempts, failed_runs, "
            "flow_run_id, scored_at, content_hash, source")


def _unindex(conn: psycopg.Connection) -> list[str]:
    """Drops the results table's key and indexes; returns the statements that make them again."""
    again = [f"ALTER TABLE judgeflow.eval_results ADD CONSTRAINT {name} {definition}" for name, definition in
             conn.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                          "WHERE conrelid = 'judgeflow.eval_results'::regclass AND contype IN ('p', 'u')")]
    for name in [a.split()[5] for a in again]:
        conn.execute(f"ALTER TABLE judgeflow.eval_results DROP CONSTRAINT {name}")
    indexes = conn.execute("SELECT indexname, indexdef FROM pg_indexes "
                           "WHERE schemaname = 'judgeflow' AND tablename = 'eval_results'").fetchall()
    for name, _ in indexes:
        conn.execute(f"DROP INDEX judgeflow.{name}")
    return again + [definition for _, definition in indexes]


def _grow(conninfo: str, have: int, want: int, *, fast: bool = False) -> float:
    """Copies of the seed rows until the table holds ``want`` rows (it holds ``have``)."""
    t0 = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.bench_seed AS SELECT *, row_number() OVER () AS i "
                     "FROM judgeflow.eval_results WHERE trace_id LIKE 'b-%'")
        again: list[str] = []
        if fast:
            conn.execute("ALTER TABLE judgeflow.eval_results SET UNLOGGED")
            again = _unindex(conn)
        seed = conn.execute("SELECT count(*) FROM public.bench_seed").fetchone()[0]
        copy = have // seed
        while have < want:
            copies = max(1, min(CHUNK, want - have) // seed)
            conn.execute(
                f"""
                INSERT INTO judgeflow.eval_results (trace_id, trace_created_at, segment, {_COLUMNS})
                SELECT s.trace_id || '-c' || g,
                       now() - interval '8 days' * (((g * 7919 + s.i * 104729) %% 1000003) / 1000003.0),
                       jsonb_build_object('app', 'app-' || ((g + s.i) %% 20), 'model', 'model-' || ((g + s.i / 20) %% 5)),
                       {", ".join(f"s.{c}" for c in _COLUMNS.split(", "))}
                FROM public.bench_seed s CROSS JOIN generate_series(CAST(%s AS int), CAST(%s AS int)) g
                """,
                (copy, copy + copies - 1),
            )
            copy += copies
            have += copies * seed
            print(f"  {have:,} rows ({time.perf_counter() - t0:.0f} s)", flush=True)
        if again:
            conn.execute("SET maintenance_work_mem = '1GB'")
            for statement in again:
                conn.execute(statement)
            print(f"  {len(again)} keys and indexes built ({time.perf_counter() - t0:.0f} s)", flush=True)
        conn.execute("VACUUM ANALYZE judgeflow.eval_results")
    return time.perf_counter() - t0


def _command(env: dict[str, str], *args: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([PY, "-m", "judgeflow", *args], env=env, cwd=env["JUDGEFLOW_HOME"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 1):  # alerts check exits 1 when a rule fires
        raise RuntimeError(f"judgeflow {' '.join(args)} failed:\n{done.stdout[-2000:]}")
    return seconds


def _in_process(env: dict[str, str]) -> float:
    """What the alert and trend tasks of a run do, timed in this process."""
    from judgeflow.alerts.service import evaluate_rules
    from judgeflow.alerts.trend import compute_trend, render_markdown
    from judgeflow.config.settings import Settings
    from judgeflow.db.engine import engine_for

    values = {k[len("JUDGEFLOW_"):].lower(): v for k, v in env.items() if k.startswith("JUDGEFLOW_")}
    settings = Settings(_env_file=None, **values)
    engine = engine_for(settings)
    t0 = time.perf_counter()
    evaluate_rules(settings, engine=engine)
    with engine.connect() as conn:
        render_markdown(compute_trend(conn, settings, days=14))
    return time.perf_counter() - t0


def _task_seconds(api: str, names: tuple[str, ...] = ("evaluate-alert-rules", "publish-trend")) -> float:
    """The summed run time of the latest task run of each name (the last ``score``'s)."""
    total = 0.0
    for name in names:
        runs = http_json(f"{api}/task_runs/filter", json.dumps(
            {"task_runs": {"name": {"like_": name}}, "sort": "EXPECTED_START_TIME_DESC", "limit": 1}).encode())
        if not runs:
            raise RuntimeError(f"no task run named {name}")
        total += float(runs[0]["total_run_time"])
    return total


def _explain(env: dict[str, str], conninfo: str, log_file) -> list[str]:
    """The plans (ANALYZE, BUFFERS) of the statements of one ``alerts check`` that read
    the rollup or the results, from ``auto_explain`` in the cluster's log."""
    dbname = conninfo.rsplit("dbname=", 1)[1]
    settings = {"session_preload_libraries": "auto_explain", "auto_explain.log_min_duration": "0",
                "auto_explain.log_analyze": "on", "auto_explain.log_buffers": "on",
                "auto_explain.log_nested_statements": "on"}
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for key, value in settings.items():
            conn.execute(f'ALTER DATABASE "{dbname}" SET {key} = \'{value}\'')
    start = log_file.stat().st_size
    try:
        _command(env, "alerts", "check")
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            for key in settings:
                conn.execute(f'ALTER DATABASE "{dbname}" RESET {key}')
    with open(log_file, errors="replace") as f:
        f.seek(start)
        text = f.read()
    plans = re.split(r"\n(?=\S.*LOG:  duration: )", text)
    return [p for p in plans if "duration:" in p and re.search(r"eval_results|result_rollup", p)]


def _new_traces(conninfo: str, n: int, start: int) -> None:
    now = datetime.now(timezone.utc)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for i in range(n):
            conn.execute("INSERT INTO llm_traces (id, created_at, input, output, metadata) VALUES (%s, %s, %s, %s, %s)",
                         (f"new-{start + i}", now - timedelta(seconds=60 - i), "a question", f"An answer {i}.",
                          '{"app": "app-1", "model": "model-2"}'))


def _sizes(conninfo: str) -> tuple[int, int, float, float]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM judgeflow.eval_results), (SELECT count(*) FROM judgeflow.result_rollup), "
            "pg_total_relation_size('judgeflow.eval_results') / 1e6, "
            "pg_total_relation_size('judgeflow.result_rollup') / 1e6").fetchone()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,200000,2000000,16000000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fast-build", action="store_true",
                        help="grow the table UNLOGGED, its key and indexes built after (see above)")
    parser.add_argument("--explain", action="store_true",
                        help="print the plans of one more alerts check at each size (auto_explain)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with Stack() as stack, JudgeProcess() as judge:
        conninfo, url = stack.new_database("rollup")
        stack.migrate(url)
        load_traces(conninfo, SEED, base_time=datetime.now(timezone.utc) - timedelta(hours=2))
        env = stack.score_env(url, judge.url, **SEGMENTS)
        env["JUDGEFLOW_HOME"] = str(stack.home)
        stack.home.mkdir(parents=True, exist_ok=True)
        _command(env, "score", "--no-alerts")
        have, fresh = _sizes(conninfo)[0], 0
        for size in sizes:
            grown = _grow(conninfo, have, size, fast=args.fast_build) if size > have else 0.0
            from judgeflow.db.rollup import compact_rollup
            import sqlalchemy as sa

            engine = sa.create_engine(url)
            compact_rollup(engine)
            engine.dispose()
            with psycopg.connect(conninfo, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE judgeflow.result_rollup")
            have, lines, results_mb, rollup_mb = _sizes(conninfo)
            print(f"# {have:,} result rows (grown in {grown:.0f} s): rollup {lines:,} lines, {rollup_mb:.0f} MB; "
                  f"results {results_mb:.0f} MB", flush=True)
            timings: dict[str, list[float]] = {k: [] for k in ("alerts check", "status", "report", "alert + trend work",
                                                               "score 10 new traces", "its alert + trend tasks")}
            for _ in range(args.runs):
                timings["alerts check"].append(_command(env, "alerts", "check"))
                timings["status"].append(_command(env, "status"))
                timings["report"].append(_command(env, "report"))
                timings["alert + trend work"].append(_in_process(env))
                _new_traces(conninfo, 10, fresh)
                fresh += 10
                timings["score 10 new traces"].append(_command(env, "score"))
                timings["its alert + trend tasks"].append(_task_seconds(stack.prefect.url))
            row = {"result rows": f"{have:,}", "rollup lines": f"{lines:,} ({rollup_mb:.0f} MB)"}
            row.update({k: f"{statistics.median(v):.2f} s" for k, v in timings.items()})
            rows.append(row)
            print(" | ".join(f"{k}: {v}" for k, v in row.items()), flush=True)
            print("  each run: " + "; ".join(f"{k} " + ", ".join(f"{t:.2f}" for t in v)
                                             for k, v in timings.items()), flush=True)
            if args.explain:
                for plan in _explain(env, conninfo, stack.pg.log_file):
                    print(plan, flush=True)
    keys = list(rows[0])
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(row[k] for k in keys) + " |")


if __name__ == "__main__":
    from judgeflow.run.metric_door import open_metrics

    open_metrics()  # the script is its own entry point: its metrics open once, before any settings
    main()
