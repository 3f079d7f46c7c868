"""A night online and the same night through the provider's batch API
(``python -m bench.batch_night [--traces 2000] [--turnaround 30]``; not part of
the test suite; docs/benchmark.md has the figures).

Both nights score the same synthetic traces (both metrics) as a fresh
``judgeflow score`` process against the test judge server run as its own
process, which bills every request it answers at ``--prices`` (USD per million
prompt and completion tokens; default gpt-4o-mini's 0.15 and 0.60) and each
batch line at half of that, and answers a batch ``--turnaround`` seconds after it
was created (a provider's real turnaround is minutes to hours; it is stated
with the figures). The online night's judge answers in 200 ms +- 50 ms with 64
calls in flight. Reported per night: the judge spend judgeflow recorded (the run
summary), the server's bill, judge calls, batches, and the whole process's wall
time; and that both nights stored the same scores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import psycopg

from bench.harness import JudgeProcess, Stack, finish_score, load_traces, start_score
from bench.run import markdown_table

PRICES = (0.15, 0.60)


def night(stack: Stack, *, traces: int, batch: bool, turnaround_s: float, out: Path) -> dict:
    conninfo, url = stack.new_database("batch" if batch else "online")
    load_traces(conninfo, traces)
    stack.migrate(url)
    prices = ",".join(str(p) for p in PRICES)
    with JudgeProcess(latency_mean=0.2, latency_jitter=0.05,
                      extra=("--prices", prices, "--batch-turnaround", str(turnaround_s))) as judge:
        env = stack.score_env(url, judge.url, JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK=str(PRICES[0]),
                              JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK=str(PRICES[1]),
                              JUDGEFLOW_JUDGE_BATCH_POLL_S="1", JUDGEFLOW_JUDGE_BATCH_POLL_MAX_S="10")
        stack.prefect.wait_idle()
        args = ["--batch"] if batch else ["--max-concurrency", "64"]
        log = out / f"{'batch' if batch else 'online'}.log"
        proc, handle, started = start_score(env, args, log=log)
        run = finish_score(proc, handle, started, log)
        stats = judge.stats()
    if run.returncode != 0:
        raise RuntimeError(f"judgeflow score failed:\n{run.output[-3000:]}")
    with psycopg.connect(conninfo) as conn:
        scores = dict(((t, m), (s, st)) for t, m, s, st in conn.execute(
            "SELECT trace_id, metric, score, status FROM judgeflow.eval_results").fetchall())
    return {"night": "batch API" if batch else "online", "run": run, "stats": stats, "scores": scores}


def row(result: dict, turnaround_s: float) -> dict[str, str]:
    run, stats = result["run"], result["stats"]
    return {
        "night": result["night"],
        "pairs scored": str(run.figure("scores written")),
        "judge calls": str(stats["requests"]),
        "batches": str(stats["batches_created"]) if result["night"] != "online" else "-",
        "judge spend USD (run summary)": run.figures.get("cost (USD)", "?"),
        "server bill USD": f"{stats['billed_usd']:.4f}",
        "whole process s": f"{run.wall_s:.1f}",
        "turnaround per batch s": f"{turnaround_s:g}" if result["night"] != "online" else "-",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--turnaround", type=float, default=30.0, help="seconds from a batch's creation to its answers")
    args = parser.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="judgeflow-batch-night-"))
    with Stack() as stack:
        results = [night(stack, traces=args.traces, batch=batch, turnaround_s=args.turnaround, out=out)
                   for batch in (False, True)]
    print(markdown_table([row(r, args.turnaround) for r in results]))
    same = results[0]["scores"] == results[1]["scores"]
    print(f"\nsame scores both nights: {same} ({len(results[0]['scores'])} results each); logs in {out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
