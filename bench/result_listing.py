"""`judgeflow results` on a million results (issue 59):

    .venv/bin/python -m bench.result_listing [--rows 1000000] [--runs 5]

A throwaway PostgreSQL (the test suite's, from the system's binaries) and one
migrated database; the results table filled with ``--rows`` rows in one
``INSERT ... SELECT generate_series`` (triggers off: the rollup is not what is
measured): two metrics over 30 days of traces, 90% passing, 8% not passing,
0.1% the judge could not score (status 'failed'), the rest skipped, 20 apps (a trace's
results share its app).
For each listing `judgeflow results` makes (every result, --failed, --errors,
one metric, a segment, a window), the plan's top lines and the median time of
``--runs`` reads of the newest 50 (judgeflow.db.result_listing.list_results)."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.db.result_listing import ResultFilter, list_results, listing_sql
from tests.support.postgres import create_database, start_test_server

_FILL = """
INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, threshold, reason, error,
                                    trace_created_at, scored_at, segment, source)
SELECT 'tr-' || (g / 2), CASE WHEN g % 2 = 0 THEN 'toxicity' ELSE 'hallucination' END,
       CASE WHEN r < 0.001 THEN 'failed' WHEN r < 0.02 THEN 'skipped' ELSE 'scored' END,
       CASE WHEN r >= 0.02 THEN r END, CASE WHEN r >= 0.02 THEN r >= 0.10 END, 0.5,
       CASE WHEN r >= 0.02 THEN 'a reason of some length for the verdict' END,
       CASE WHEN r < 0.001 THEN 'TimeoutError: the judge did not answer' END,
       :start + (g::float / :rows) * interval '30 days', now(), jsonb_build_object('app', 'app' || ((g / 2) % 20)),
       'table:public.llm_traces@results-db'
FROM (SELECT g, (hashint4(g)::float / 4294967296 + 0.5) AS r FROM generate_series(0, :rows - 1) g) s
"""

CASES = {
    "every result": ResultFilter(),
    "--failed": ResultFilter(kind="failed"),
    "--errors": ResultFilter(kind="errors"),
    "--metric toxicity --failed": ResultFilter(metrics=("toxicity",), kind="failed"),
    "--segment app=app7": ResultFilter(segment={"app": "app7"}),
    "--segment app=gone (no result has it)": ResultFilter(segment={"app": "gone"}),
    "--errors --since 20d --until 10d": None,  # set from the data's start
}


def _plan(conn, wanted: ResultFilter) -> list[str]:
    sql, params = listing_sql(wanted, ["hallucination", "toxicity"])
    compiled = sql.compile(conn, compile_kwargs={"render_postcompile": True})
    bound = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in compiled.construct_params(params).items()}
    return list(conn.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {compiled.string}", bound).scalars())


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--rows", type=int, default=1_000_000)
    args.add_argument("--runs", type=int, default=5)
    opts = args.parse_args()
    server = start_test_server()
    try:
        _, url = create_database(server)
        engine = sa.create_engine(url)
        migrate.upgrade(engine)
        start = datetime.now(timezone.utc) - timedelta(days=30)
        began = time.monotonic()
        with engine.begin() as conn:
            conn.exec_driver_sql("SET LOCAL session_replication_role = replica")  # no triggers: no rollup
            conn.execute(sa.text(_FILL), {"rows": opts.rows, "start": start})
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("VACUUM ANALYZE judgeflow.eval_results")
            n = conn.exec_driver_sql("SELECT count(*) FROM judgeflow.eval_results").scalar()
            print(f"{n:,} results filled and analysed in {time.monotonic() - began:.0f} s")
            cases = {**CASES, "--errors --since 20d --until 10d": ResultFilter(
                kind="errors", since=start + timedelta(days=10), until=start + timedelta(days=20))}
            for name, wanted in cases.items():
                times = []
                for _ in range(opts.runs):
                    t = time.perf_counter()
                    rows = list_results(conn, wanted)
                    times.append(time.perf_counter() - t)
                plan = _plan(conn, wanted)
                scans = sorted({line.strip().split(" on ")[0].lstrip("-> ") for line in plan if " using " in line})
                print(f"{name}: {len(rows)} rows, median {statistics.median(times) * 1000:.1f} ms; "
                      f"{'; '.join(scans)}; {plan[-1].strip()}")
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
