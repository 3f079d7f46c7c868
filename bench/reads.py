"""What a nightly run reads from the database, as the history grows
(issue 29): N traces already scored plus 1,000 new ones, offline judge.

Per size N (default 1M; ``--sizes 1000000,10000000``):

* the source (``llm_traces``: N rows over 30 days, one index on created_at)
  and ``eval_results`` (2N scored rows) are made with ``generate_series``;
  the watermarks are set where a run that scored them would have left them
  (the newest trace), then 1,000 new traces are added;
* **after** (this version): ``judgeflow score --no-alerts`` with
  ``JUDGEFLOW_JUDGE_MODEL=offline``: wall time, and the rows read from each
  table (``pg_stat_user_tables`` deltas: seq_scan, seq_tup_read, idx_scan,
  idx_tup_fetch); every statement the run made is logged with its plan by
  ``auto_explain`` (``--plans`` prints them); then ``judgeflow status``
  (wall time of the command, and of ``work_status`` in-process);
* **before**: the previous version's reads over the same data, executed
  directly: its pending count (``judgeflow.db.pending.count_pending``, an
  anti-join of every source row against eval_results), its unusable-row
  count over the whole source, and its status query, with the same
  counters.

    .venv/bin/python -m bench.reads [--sizes 1000000] [--plans]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench.harness import PY, Stack, parse_summary
from judgeflow.sources.table import CREATE_DEFAULT_TABLE

NEW = 1000
TABLES = ("llm_traces", "eval_results", "claims", "watermarks", "result_counts")
COUNTERS = ("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch", "idx_tup_read")


def stats(conninfo: str) -> dict[str, dict[str, int]]:
    """Per table: the pg_stat_user_tables counters, and idx_tup_read (index
    entries read, index-only scans included) summed over its indexes."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            f"SELECT t.relname, {', '.join(f'COALESCE(t.{c}, 0)' for c in COUNTERS[:-1])}, "
            "(SELECT COALESCE(sum(i.idx_tup_read), 0) FROM pg_stat_user_indexes i WHERE i.relid = t.relid) "
            "FROM pg_stat_user_tables t WHERE t.relname = ANY(%s)", (list(TABLES),)
        ).fetchall()
    return {r[0]: dict(zip(COUNTERS, map(int, r[1:]))) for r in rows}


def delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    return {t: {c: after.get(t, {}).get(c, 0) - before.get(t, {}).get(c, 0) for c in COUNTERS} for t in TABLES}


def settled_stats(conninfo: str) -> dict[str, dict[str, int]]:
    """Counters once every backend has reported: backends flush them some time
    after going idle (longer on a loaded machine), so until two reads a few
    seconds apart agree (at most a minute)."""
    last = stats(conninfo)
    for _ in range(20):
        time.sleep(3)
        now = stats(conninfo)
        if now == last:
            return now
        last = now
    return last


def rows_read(d: dict) -> dict[str, int]:
    """Rows read by sequential scans plus index entries read (index-only scans included)."""
    return {t: int(d[t]["seq_tup_read"] + d[t]["idx_tup_read"]) for t in d}


def make_data(conninfo: str, n: int) -> float:
    t0 = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(CREATE_DEFAULT_TABLE)
        # N traces over the 30 days before yesterday; ~300 characters each
        conn.execute(
            """
            INSERT INTO llm_traces (id, created_at, input, output, context, metadata)
            SELECT 'h-' || lpad(i::text, 8, '0'), now() - interval '31 days' + (i * interval '30 days') / %s,
                   'question ' || i, 'Answer ' || i || '. The order shipped on Monday. It is fine.',
                   jsonb_build_array('context for trace ' || i), '{"app": "bench"}'
            FROM generate_series(1, %s) AS i
            """,
            (n, n),
        )
        conn.execute(
            """
            INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed, threshold,
                judge_calls, attempts, flow_run_id, trace_created_at, scored_at)
            SELECT t.id, m.metric, 'bench', 'scored', 0, true, 0.5, 1, 1, 'earlier-run', t.created_at, now()
            FROM llm_traces t CROSS JOIN (VALUES ('toxicity'), ('hallucination')) AS m(metric)
            """
        )
        # where the run that scored them would have left the watermarks
        conn.execute(
            """
            INSERT INTO judgeflow.watermarks (source, metric, scope, scored_through, flow_run_id)
            SELECT 'table:llm_traces', m.metric, 'sample=1.0', (SELECT max(created_at) FROM llm_traces), 'earlier-run'
            FROM (VALUES ('toxicity'), ('hallucination')) AS m(metric)
            """
        )
        conn.execute(
            """
            INSERT INTO llm_traces (id, created_at, input, output, context, metadata)
            SELECT 'new-' || lpad(i::text, 5, '0'), now() - interval '1 hour' + i * interval '1 second',
                   'question ' || i, 'A new answer ' || i || '. It is fine.', NULL, '{"app": "bench"}'
            FROM generate_series(1, %s) AS i
            """,
            (NEW,),
        )
        conn.execute("VACUUM ANALYZE llm_traces")
        conn.execute("VACUUM ANALYZE judgeflow.eval_results")
    return time.perf_counter() - t0


def seed_epochs(url: str) -> None:
    import sqlalchemy as sa

    from judgeflow.db.epochs import configured, record_epochs

    engine = sa.create_engine(url)
    with engine.begin() as conn:
        # the source of the bench's runs: the table source in judgeflow's own database
        record_epochs(conn, "table:llm_traces@results-db", configured("offline", ["toxicity", "hallucination"]),
                      flow_run_id="earlier-run")
    engine.dispose()


def before_reads(url: str, conninfo: str) -> tuple[float, dict]:
    """The previous version's reads of a nightly run and of `judgeflow status`,
    executed over this data (its SQL is still judgeflow.db.pending.pending_where)."""
    import sqlalchemy as sa

    from judgeflow.db.pending import count_pending, pending_where
    from judgeflow.sources.table import SourceTable
    from judgeflow.sources.unusable import count_unusable

    engine = sa.create_engine(url)
    source = SourceTable.parse("llm_traces")
    s0 = settled_stats(conninfo)
    t0 = time.perf_counter()
    # each in its own transaction, as the previous version ran them (its unusable-row
    # count sets a 60 s statement timeout for its own transaction only)
    with engine.connect() as conn:
        count_unusable(conn, source)  # the whole source, every run
    with engine.connect() as conn:
        count_pending(conn, source, ["toxicity", "hallucination"], max_failed_runs=3)  # pending at start
    with engine.connect() as conn:
        where, params = pending_where(max_failed_runs=3)  # the first claim batch's candidates
        conn.execute(sa.text(
            f"SELECT t.id FROM {source.sql} t CROSS JOIN unnest(CAST(:metrics AS text[])) AS m(metric) "
            f"WHERE {where} ORDER BY t.created_at, t.id::text, m.metric LIMIT 100"
        ), {**params, "metrics": ["toxicity", "hallucination"]}).all()
    with engine.connect() as conn:
        # its status: results grouped over eval_results
        conn.execute(sa.text("SELECT metric, status, count(*) FROM judgeflow.eval_results GROUP BY 1, 2")).all()
    seconds = time.perf_counter() - t0
    engine.dispose()
    return seconds, rows_read(delta(s0, settled_stats(conninfo)))


def plans_from_log(log: Path, since: int) -> list[str]:
    """The auto_explain entries the server logged after byte offset ``since``."""
    text = log.read_bytes()[since:].decode("utf-8", "replace")
    return [m.strip() for m in re.split(r"\n(?=\S.*LOG:  duration:)", text) if "Query Text:" in m]


def measure(stack: Stack, n: int, *, show_plans: bool) -> dict:
    conninfo, url = stack.new_database(f"reads{n}")
    stack.migrate(url)
    made_s = make_data(conninfo, n)
    # the judge epoch in force, as the run that scored the history recorded it (a
    # database without one reads eval_results whole, once, to place the first)
    seed_epochs(url)
    print(f"# {n:,} scored traces + {NEW:,} new: data made in {made_s:.0f}s", flush=True)

    before_s, before_rows = before_reads(url, conninfo)

    name = conninfo.split("dbname=")[1]
    with psycopg.connect(stack.admin_conninfo(), autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET session_preload_libraries = \'auto_explain\'')
        conn.execute(f'ALTER DATABASE "{name}" SET auto_explain.log_min_duration = 0')
        conn.execute(f'ALTER DATABASE "{name}" SET auto_explain.log_nested_statements = on')
    server_log = stack.pg.log_file  # where the embedded server logs (pg_ctl -l)
    offset = server_log.stat().st_size if server_log.exists() else 0

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUDGEFLOW_", "PREFECT_"))}
    env.update(stack.prefect.env(), JUDGEFLOW_DATABASE_URL=url, JUDGEFLOW_JUDGE_MODEL="offline",
               JUDGEFLOW_HOME=str(stack.home), LITELLM_LOCAL_MODEL_COST_MAP="True")
    stack.home.mkdir(parents=True, exist_ok=True)
    s0 = settled_stats(conninfo)
    t0 = time.perf_counter()
    score = subprocess.run([PY, "-m", "judgeflow", "score", "--no-alerts"], env=env, cwd=stack.home,
                           capture_output=True, text=True)
    score_s = time.perf_counter() - t0
    after_rows = delta(s0, settled_stats(conninfo))
    figures = parse_summary(score.stdout)
    with psycopg.connect(stack.admin_conninfo(), autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" RESET ALL')
    plans = plans_from_log(server_log, offset)

    t0 = time.perf_counter()
    status = subprocess.run([PY, "-m", "judgeflow", "status"], env=env, cwd=stack.home, capture_output=True,
                            text=True)
    status_s = time.perf_counter() - t0
    os.environ.update(JUDGEFLOW_DATABASE_URL=url)
    from judgeflow.db.engine import dispose_engines
    from judgeflow.status.work import work_status
    from judgeflow.config.settings import load_settings

    work_status(load_settings())  # warm: the engine, the migration check
    t0 = time.perf_counter()
    work_status(load_settings())
    status_inproc_s = time.perf_counter() - t0
    dispose_engines()

    seq = [p for p in plans if re.search(r"Seq Scan on (llm_traces|eval_results)", p)]
    durations = sorted(((float(m.group(1)), p) for p in plans
                        for m in [re.search(r"duration: ([0-9.]+) ms", p)] if m), reverse=True)
    for ms, p in durations[:3]:  # where the run's database time went
        print(f"TOP {ms:.0f} ms: " + " ".join(p.split("Query Text:", 1)[-1].split())[:300])
    out = {
        "n": n, "score_rc": score.returncode, "score_s": score_s, "scored": figures.get("scores written"),
        "flow_s": figures.get("duration (s)"),
        "before_s": before_s, "before_rows": before_rows, "after": after_rows, "after_rows": rows_read(after_rows),
        "status_rc": status.returncode, "status_s": status_s, "status_inproc_s": status_inproc_s,
        "statements": len(plans), "seq_scan_plans": len(seq), "db_ms": round(sum(ms for ms, _ in durations)),
    }
    print(out, flush=True)
    if score.returncode or status.returncode:
        print(score.stdout[-3000:], score.stderr[-3000:], status.stdout[-2000:], status.stderr[-2000:])
    for p in seq:  # what read a table whole: always shown
        print("SEQ SCAN " + "-" * 71)
        print(p[:3000])
    if show_plans:
        for p in plans:
            print("-" * 80)
            print(p)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--plans", action="store_true", help="print the plan of every statement of the run")
    args = parser.parse_args()
    with Stack() as stack:
        results = [measure(stack, int(n), show_plans=args.plans) for n in args.sizes.split(",")]
    for r in results:
        print(f"| {r['n']:,} | before {r['before_s']:.1f}s {r['before_rows']} | after score {r['score_s']:.1f}s "
              f"{r['after_rows']} | status {r['status_s']:.2f}s ({r['status_inproc_s']:.3f}s in-process) "
              f"| statements {r['statements']}, seq-scan plans {r['seq_scan_plans']} |")


if __name__ == "__main__":
    from judgeflow.run.metric_door import open_metrics

    open_metrics()  # the script is its own entry point: its metrics open once, before any settings
    sys.exit(main())
