"""What `judgeflow score` prints to the console: bytes of stdout + stderr for one
run over N traces, without -v (the default: warnings, errors, progress lines,
the summary) and with -v (Prefect's whole console log, as it printed before
judgeflow quieted it). Not part of the test suite:

    .venv/bin/python -m bench.console_output [--traces 10000] [--judge offline|server]

Each run gets a fresh database with the same traces; stdout and stderr are pipes
(as under cron or CI: progress as short lines, no live display). ``--judge
offline`` uses the offline judge with 100 distinct contents (identical content is
reused, so the run is quick; its batches and task runs are those of N traces);
``server`` the instant local judge server with distinct contents.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from datetime import timedelta

import psycopg

from bench.harness import BASE_TIME, PY, JudgeProcess, Stack, load_traces
from judgeflow.sources.table import CREATE_DEFAULT_TABLE


def load_repeating(conninfo: str, n: int, distinct: int) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(CREATE_DEFAULT_TABLE)
        with conn.cursor() as cur:
            with cur.copy("COPY llm_traces (id, created_at, input, output, context, metadata) FROM STDIN") as copy:
                for i in range(n):
                    k = i % distinct
                    copy.write_row((f"b-{i:07d}", BASE_TIME + timedelta(seconds=i), f"question {k}",
                                    f"Answer {k}: the order shipped on Monday. I think it is fine.", None, "{}"))
        conn.execute("ANALYZE llm_traces")


def measure(stack: Stack, traces: int, judge: str, verbose: bool, judge_url: str | None) -> dict:
    conninfo, url = stack.new_database("console")
    if judge == "offline":
        load_repeating(conninfo, traces, distinct=100)
        env = stack.score_env(url, "http://unused", JUDGEFLOW_JUDGE_MODEL="offline")
    else:
        load_traces(conninfo, traces)
        env = stack.score_env(url, judge_url)
    stack.migrate(url)
    argv = [PY, "-m", "judgeflow", "score", "--no-alerts", *(["-v"] if verbose else [])]
    stack.home.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=stack.home, capture_output=True)
    return {
        "verbose": verbose, "returncode": done.returncode, "stdout_bytes": len(done.stdout),
        "stderr_bytes": len(done.stderr), "stderr_lines": done.stderr.count(b"\n"),
        "wall_s": round(time.monotonic() - started, 1), "stderr": done.stderr.decode(errors="replace"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=10_000)
    parser.add_argument("--judge", choices=("offline", "server"), default="offline")
    args = parser.parse_args()
    with Stack() as stack:
        judge = JudgeProcess() if args.judge == "server" else None
        try:
            rows = [measure(stack, args.traces, args.judge, verbose, judge.url if judge else None)
                    for verbose in (False, True)]
        finally:
            if judge:
                judge.stop()
    print(f"| {args.traces:,} traces, judge {args.judge} | stdout bytes | stderr bytes | stderr lines | wall s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {'with -v' if r['verbose'] else 'default'} | {r['stdout_bytes']:,} | {r['stderr_bytes']:,} | "
              f"{r['stderr_lines']:,} | {r['wall_s']} |")
    quiet = rows[0]
    print("\nstderr without -v:\n" + quiet["stderr"])
    for r in rows:
        if r["returncode"] != 0:
            raise SystemExit(f"a run failed (exit {r['returncode']}):\n{r['stderr'][-3000:]}")


if __name__ == "__main__":
    main()
