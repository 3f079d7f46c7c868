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
* the rollup's size (lines, MB) and the results table's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from datetime import datetime, timedelta, timezone

import psycopg

from bench.harness import PY, JudgeProcess, Stack, load_traces

SEED = 1000  # traces scored for real: 2,000 result rows
CHUNK = 500_000
SEGMENTS = {"JUDGEFLOW_ALERT_SEGMENT_BY": "app,model", "JUDGEFLOW_TOXICITY_REGRESSION_MIN_INCREASE": "0.02",
            "JUDGEFLOW_HALLUCINATION_REGRESSION_MIN_INCREASE": "0.02", "JUDGEFLOW_ALERT_PREFECT_EVENTS": "false"}
_COLUMNS = ("metric, metric_version, status, score, passed, threshold, reason, details, judge_model, prompt_tokens, "
            "completion_tokens, cost_usd, latency_ms, judge_calls, error, error_kind, attempts, failed_runs, "
            "flow_run_id, scored_at, content_hash, source")


def _grow(conninfo: str, have: int, want: int) -> float:
    """Copies of the seed rows until the table holds ``want`` rows (it holds ``have``)."""
    t0 = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.bench_seed AS SELECT *, row_number() OVER () AS i "
                     "FROM judgeflow.eval_results WHERE trace_id LIKE 'b-%'")
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
            grown = _grow(conninfo, have, size) if size > have else 0.0
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
                                                               "score 10 new traces")}
            for _ in range(args.runs):
                timings["alerts check"].append(_command(env, "alerts", "check"))
                timings["status"].append(_command(env, "status"))
                timings["report"].append(_command(env, "report"))
                timings["alert + trend work"].append(_in_process(env))
                _new_traces(conninfo, 10, fresh)
                fresh += 10
                timings["score 10 new traces"].append(_command(env, "score"))
            row = {"result rows": f"{have:,}", "rollup lines": f"{lines:,} ({rollup_mb:.0f} MB)"}
            row.update({k: f"{statistics.median(v):.2f} s" for k, v in timings.items()})
            rows.append(row)
            print(" | ".join(f"{k}: {v}" for k, v in row.items()), flush=True)
    keys = list(rows[0])
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(row[k] for k in keys) + " |")


if __name__ == "__main__":
    main()
