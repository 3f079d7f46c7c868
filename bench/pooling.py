"""judgeflow behind connection poolers: ``.venv/bin/python -m bench.pooling``.

Needs Debian's ``pgbouncer`` (``./scripts/setup --postgres`` installs it).
Starts a private PostgreSQL, a Prefect server, PgBouncer in ``transaction``
and in ``session`` mode (``server_lifetime = 3``, ``server_idle_timeout = 2``,
the issue's settings; tests/support/pgbouncer.py) and the local judge server,
then prints:

1. **prepared statements**: what psycopg's server-side prepared statements
   (``prepare_threshold = 5``, its default) saved on a direct connection
   against judgeflow's ``None``: median ms of a claim of 50 pairs and of the
   write of their 50 results, the statements a run repeats most, at a
   10,000-trace backlog;
2. **a lost run lock**: a run's lock backend killed (``pg_terminate_backend``)
   directly and through the session pool: seconds until the run holds its
   lock (and so its claims) again;
3. **two runs at once** (the issue's case): N traces, a 200 ms judge, two
   ``judgeflow score`` started together through each pool and directly:
   results stored, failed/unstorable, superseded, pairs judged more than once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import psycopg
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bench.harness import JudgeProcess, Stack, finish_score, http_json, load_traces, start_score

PAIRS = 50


def _settings(url: str, home: Path):
    from judgeflow.config.settings import Settings

    return Settings(database_url=url, home=home, judge_model="offline")


def prepared_statements(stack: Stack, rounds: int) -> dict[str, dict[str, float]]:
    """Median ms per claim and per write, each threshold on a database of its
    own, their rounds interleaved so that the machine's changing speed hits both."""
    from judgeflow.db import engine as engines
    from judgeflow.tasks.claims import claim_traces
    from judgeflow.tasks.scoring import store_outcomes

    kinds = {"prepare_threshold=5 (psycopg's default)": 5, "None (judgeflow)": None}
    urls = {}
    engines.dispose_engines()
    for label, threshold in kinds.items():
        conninfo, url = stack.new_database("prepared")
        load_traces(conninfo, 10_000)
        stack.migrate(url)
        # the engine judgeflow builds, with psycopg's default threshold put back for the comparison
        engines._engines[url] = create_engine(
            url, pool_pre_ping=True, pool_size=8, connect_args={**engines.CONNECT_ARGS, "prepare_threshold": threshold}
        )
        urls[label] = url
    times = {label: {"claim": [], "write": []} for label in kinds}
    cursors = dict.fromkeys(kinds)
    for _ in range(rounds):
        for label in kinds:
            settings = _settings(urls[label], stack.home)
            t0 = time.perf_counter()
            batch = claim_traces.fn(settings, "bench:1", ["toxicity"], PAIRS, cursor=cursors[label])
            times[label]["claim"].append((time.perf_counter() - t0) * 1000)
            cursors[label] = batch.cursor
            rows = [_row(w) for w in batch.items]
            t0 = time.perf_counter()
            store_outcomes(settings, rows, owner="bench:1", rescore_before=None)
            times[label]["write"].append((time.perf_counter() - t0) * 1000)
    engines.dispose_engines()
    # the first rounds prepare (threshold 5): the steady state is what a long run sees
    return {label: {k: statistics.median(v[10:]) for k, v in t.items()} for label, t in times.items()}


def _row(work) -> dict:
    return {
        "trace_id": work.trace_id, "metric": work.metric, "metric_version": "bench", "status": "scored",
        "score": 0.0, "passed": True, "threshold": 0.5, "reason": None, "details": {}, "judge_model": "bench",
        "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.0, "latency_ms": 1.0, "judge_calls": 1,
        "error": None, "error_kind": None, "attempts": 1, "flow_run_id": "bench",
        "trace_created_at": work.created_at or datetime.now(timezone.utc),
    }


def lost_lock(stack: Stack, url: str, direct_url: str, repeats: int) -> list[float]:
    """Seconds from the kill of the run's lock backend to the lock held again."""
    from judgeflow.db.pending import RUN_LOCK_NAMESPACE
    from judgeflow.db.leases import LeaseKeeper

    admin = create_engine(direct_url)
    held_sql = text(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
        "AND classid = CAST(CAST(:ns AS int) AS oid) AND objid = CAST(CAST(:k AS int) AS oid)"
    )
    gaps = []
    try:
        with LeaseKeeper(_settings(url, stack.home), "bench-lock:1") as keeper:
            for _ in range(repeats):
                with admin.connect() as conn:
                    [pid] = conn.execute(held_sql, {"ns": RUN_LOCK_NAMESPACE, "k": keeper.owner_key}).scalars().all()
                    conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
                    killed = time.monotonic()
                    while True:
                        pids = conn.execute(held_sql, {"ns": RUN_LOCK_NAMESPACE, "k": keeper.owner_key}).scalars().all()
                        if pids and pids != [pid]:
                            break
                        time.sleep(0.01)
                gaps.append(time.monotonic() - killed)
                time.sleep(0.5)
    finally:
        admin.dispose()
    return gaps


def two_runs(stack: Stack, judge: JudgeProcess, url: str, conninfo: str, traces: int, tag: str) -> dict:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("TRUNCATE judgeflow.eval_results, judgeflow.claims, judgeflow.superseded_results")
    judge.reset()
    env = stack.score_env(url, judge.url, JUDGEFLOW_JUDGE_PROCESSES="1")
    logs = [stack.dir / f"two-runs-{tag}-{i}.log" for i in range(2)]
    started = [start_score(env, ["--batch-size", "20"], log=log) for log in logs]
    runs = [finish_score(proc, handle, t0, log) for (proc, handle, t0), log in zip(started, logs)]
    calls = http_json(f"{judge.base}/pair-calls")
    with psycopg.connect(conninfo) as conn:
        stored = dict(conn.execute("SELECT status, count(*) FROM judgeflow.eval_results GROUP BY status").fetchall())
        unstorable = conn.execute(
            "SELECT count(*) FROM judgeflow.eval_results WHERE error_kind = 'unstorable'").fetchone()[0]
        superseded = conn.execute("SELECT count(*) FROM judgeflow.superseded_results").fetchone()[0]
    return {
        "exit codes": [r.returncode for r in runs], "stored": stored, "unstorable": unstorable,
        "superseded": superseded, "pairs judged": calls["pairs"],
        "pairs judged more than once": calls["pairs_called_more_than_once"],
        "wall s": round(max(r.wall_s for r in runs), 1),
    }


def main() -> None:
    from tests.support.pgbouncer import PgBouncer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=198, help="traces for the two-runs case (the issue's 198)")
    parser.add_argument("--tries", type=int, default=3, help="two-runs tries per connection kind")
    parser.add_argument("--rounds", type=int, default=100, help="claim + write rounds per prepare_threshold")
    args = parser.parse_args()

    print(f"# bench.pooling, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores\n")
    with Stack() as stack:
        bouncers = {mode: PgBouncer(stack.pg, pool_mode=mode).start() for mode in ("transaction", "session")}
        try:
            print("## prepared statements, direct connection (median ms per round, rounds 11+)\n")
            for label, ms in prepared_statements(stack, args.rounds).items():
                print(f"- {label}: claim {PAIRS} pairs {ms['claim']:.2f} ms, write {PAIRS} results {ms['write']:.2f} ms")

            conninfo, url = stack.new_database("pooled")
            name = make_url(url).database
            urls = {"direct": url, **{f"PgBouncer {m}": b.url(name) for m, b in bouncers.items()}}
            load_traces(conninfo, args.traces)
            stack.migrate(url)

            print("\n## a killed lock backend: seconds until the run holds its lock again\n")
            for kind in ("direct", "PgBouncer session"):
                gaps = lost_lock(stack, urls[kind], url, 5)
                print(f"- {kind}: " + ", ".join(f"{g:.2f}" for g in gaps))

            print(f"\n## two `judgeflow score` at once, {args.traces} traces, 200 ms judge\n")
            with JudgeProcess(latency_mean=0.2) as judge:
                for kind, target in urls.items():
                    for i in range(args.tries):
                        print(f"- {kind} #{i + 1}: {two_runs(stack, judge, target, conninfo, args.traces, f'{kind}-{i}')}")
        finally:
            for bouncer in bouncers.values():
                bouncer.stop()


if __name__ == "__main__":
    from judgeflow.run.metric_door import open_metrics

    open_metrics()  # the script is its own entry point: its metrics open once, before any settings
    main()
