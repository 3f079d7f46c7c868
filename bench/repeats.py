"""What judging identical content once saves: ``.venv/bin/python -m bench.repeats``.

The same source is scored twice, each time in a fresh database, with
``JUDGEFLOW_REUSE_IDENTICAL`` on and off: ``--traces`` synthetic traces
(bench.harness.synthetic_output) of which ``--repeat-share`` are repeats of
``--canned`` canned exchanges -- the same input, output and context, as a
support bot's greeting, "thanks" or hand-over reply logs them -- drawn with
Zipf-like weights (the first canned exchange is the most frequent). Reported:
judge calls, the run's cost at gpt-4o-mini prices (the judge server reports
token usage; litellm prices it), the flow's duration, and the rows written.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import psycopg

from bench.harness import BASE_TIME, JudgeProcess, Stack, run_score, synthetic_output
from judgeflow.sources.table import CREATE_DEFAULT_TABLE

CANNED = [
    ("hi", "Hello! How can I help you today?"),
    ("thanks", "You're welcome! Is there anything else I can help with?"),
    ("talk to a human", "I'm connecting you with a member of our support team. Please hold on."),
    ("where is my order", "You can track your order with the link in your confirmation e-mail."),
    ("cancel", "Your request has been received. Our team will get back to you within one business day."),
]


def load(conninfo: str, n: int, share: float, canned: int, seed: int = 7) -> int:
    """Load the traces; returns how many are repeats of a canned exchange."""
    rng = random.Random(seed)
    pool = [CANNED[i % len(CANNED)] for i in range(canned)]
    pool = [(q if i < len(CANNED) else f"{q} ({i})", a) for i, (q, a) in enumerate(pool)]
    weights = [1 / (k + 1) for k in range(len(pool))]
    repeats = 0
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(CREATE_DEFAULT_TABLE)
        with conn.cursor() as cur:
            with cur.copy("COPY llm_traces (id, created_at, input, output, context, metadata) FROM STDIN") as copy:
                for i in range(n):
                    if rng.random() < share:
                        question, answer = rng.choices(pool, weights)[0]
                        row = (question, answer, json.dumps(["support handbook: canned replies"]))
                        repeats += 1
                    else:
                        row = (f"question {i}", synthetic_output(i),
                               json.dumps([f"context for trace {i}"]) if i % 2 else None)
                    copy.write_row((f"r-{i:07d}", BASE_TIME + timedelta(seconds=i), *row, '{"source": "bench"}'))
        conn.execute("ANALYZE llm_traces")
    return repeats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--repeat-share", type=float, default=0.3)
    parser.add_argument("--canned", type=int, default=20, help="distinct canned exchanges")
    parser.add_argument("--latency", type=float, default=0.2, help="judge latency mean, s (+-25%%)")
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)

    out = Path(tempfile.mkdtemp(prefix="judgeflow-bench-repeats-"))
    rows = []
    with Stack() as stack:
        for reuse in (False, True):
            conninfo, url = stack.new_database("repeats")
            repeats = load(conninfo, args.traces, args.repeat_share, args.canned)
            stack.migrate(url)
            with JudgeProcess(latency_mean=args.latency, latency_jitter=args.latency / 4) as judge:
                env = stack.score_env(url, judge.url, JUDGEFLOW_JUDGE_MODEL="openai/gpt-4o-mini",
                                      JUDGEFLOW_REUSE_IDENTICAL=str(reuse).lower())
                stack.prefect.wait_idle()
                run = run_score(env, ["--max-concurrency", str(args.concurrency)],
                                log=out / f"reuse-{reuse}.log")
                time.sleep(0.3)
                calls = int(judge.stats().get("requests", 0))
            if run.returncode != 0:
                raise SystemExit(f"judgeflow score failed:\n{run.output[-3000:]}")
            with psycopg.connect(conninfo) as conn:
                written, copied = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE details ? 'reused_from') FROM judgeflow.eval_results "
                    "WHERE status = 'scored'").fetchone()
            rows.append({
                "reuse identical": "on" if reuse else "off", "traces": args.traces,
                "repeats": f"{repeats} ({repeats / args.traces:.0%})", "judge calls": calls,
                "cost (USD)": run.figures.get("cost (USD)", "?"), "flow s": f"{run.duration_s or 0:.1f}",
                "rows scored": written, "rows copied": copied,
            })
            print(rows[-1], flush=True)
    keys = list(rows[0])
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    off, on = rows
    print(f"\njudge calls saved: {1 - on['judge calls'] / off['judge calls']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
