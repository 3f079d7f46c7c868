"""Finding quiet sessions as the history grows (issue 57): what a nightly run's session search
reads is in proportion to the night's new turns, not to the turns and sessions seen before.

Per history size H (turns; default 1,000,000 and 3,000,000, ``--sizes``), in a fresh database of a
private PostgreSQL cluster:

* the source (``llm_traces``, one index on created_at) holds H old traces in sessions of 10 turns,
  all recorded in ``session_turns`` / ``sessions`` and judged (``judged_turns = turns``), the scan
  moved past them (``session_scans``) as a run would have left it; both made with ``generate_series``;
* then a night: ``--sessions`` new sessions (default 100,000) of 3 turns each, 2 hours old;
* measured, in this process, through judgeflow's own functions (``tasks/sessions.py``'s
  ``record_new_turns``, ``judgeflow.db.sessions.quiet_sessions``): the wall time of recording the
  night's turns and of the quiet-session search, the rows read per table
  (``pg_stat_user_tables``) and the search's plan with ``EXPLAIN (ANALYZE, BUFFERS)``.

    .venv/bin/python -m bench.sessions [--sizes 1000000,3000000] [--sessions 100000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import psycopg
import sqlalchemy as sa

from judgeflow.db.embedded import EmbeddedPostgres

TABLES = ("llm_traces", "session_turns", "sessions", "eval_results")
QUIET_SQL = """
    SELECT session_id, turns, last_turn_at FROM judgeflow.sessions
    WHERE source = %(source)s AND (judged_turns IS NULL OR judged_turns <> turns)
      AND last_turn_at < now() - make_interval(secs => 1800)
    ORDER BY last_turn_at, session_id
"""


def _stats(conninfo: str) -> dict[str, tuple[int, int]]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute("SELECT relname, COALESCE(seq_tup_read, 0), COALESCE(idx_tup_fetch, 0) "
                            "FROM pg_stat_user_tables WHERE relname = ANY(%s)", (list(TABLES),)).fetchall()
    return {r[0]: (int(r[1]), int(r[2])) for r in rows}


def _history(conninfo: str, source: str, turns: int, sessions: int) -> None:
    """H old traces in sessions of 10 turns, recorded and judged; then the night's new traces."""
    per = 10
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.llm_traces (id text PRIMARY KEY, created_at timestamptz NOT NULL, "
                     "input text, output text, context jsonb, metadata jsonb)")
        conn.execute("CREATE INDEX llm_traces_created_at_idx ON public.llm_traces (created_at)")
        conn.execute(f"INSERT INTO public.llm_traces SELECT 'h' || i, timestamptz '2026-06-01' + i * interval '1 s', "
                     f"'q', 'a', NULL, jsonb_build_object('session_id', 'hs' || (i / {per})) "
                     f"FROM generate_series(0, {turns - 1}) i")
        conn.execute(f"INSERT INTO judgeflow.session_turns SELECT %s, 'h' || i, "
                     f"'s:' || substr(md5('hs' || (i / {per})), 1, 32) || '00000000', "
                     f"timestamptz '2026-06-01' + i * interval '1 s' FROM generate_series(0, {turns - 1}) i",
                     (source,))
        conn.execute("INSERT INTO judgeflow.sessions SELECT session_id, %s, session_id, min(created_at), "
                     "max(created_at), count(*), count(*), max(created_at), max(created_at) "
                     "FROM judgeflow.session_turns GROUP BY session_id", (source,))
        conn.execute("INSERT INTO judgeflow.session_scans (source, scanned_to) "
                     "SELECT %s, max(created_at) FROM public.llm_traces", (source,))
        conn.execute("INSERT INTO public.llm_traces SELECT 'n' || i, now() - interval '2 h' + i * interval '1 ms', "
                     f"'q', 'a', NULL, jsonb_build_object('session_id', 'ns' || (i / 3)) "
                     f"FROM generate_series(0, {3 * sessions - 1}) i")
        conn.execute("VACUUM ANALYZE")


def _case(pg: EmbeddedPostgres, n: int, turns: int, sessions: int) -> dict:
    from judgeflow.config.settings import Settings
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.db.sessions import quiet_sessions
    from judgeflow.run.metric_door import open_metrics
    from judgeflow.sources.identity import result_source
    from judgeflow.tasks.sessions import record_new_turns

    name = f"sessions_{n}"
    admin = f"host=127.0.0.1 port={pg.port} user=judgeflow dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    conninfo = admin.replace("dbname=postgres", f"dbname={name}")
    url = f"postgresql+psycopg://judgeflow@127.0.0.1:{pg.port}/{name}"
    migrate.upgrade(sa.create_engine(url))
    open_metrics(None)
    settings = Settings(_env_file=None, database_url=url, source_lookback="1h")
    source = result_source(settings)
    t0 = time.perf_counter()
    _history(conninfo, source, turns, sessions)
    made_s = time.perf_counter() - t0
    before = _stats(conninfo)
    t0 = time.perf_counter()
    read = record_new_turns(settings)
    record_s = time.perf_counter() - t0
    mid = _stats(conninfo)
    t0 = time.perf_counter()
    with engine_for(settings).connect() as conn:
        quiet = quiet_sessions(conn, source, settings.session_idle_s)
    quiet_s = time.perf_counter() - t0
    after = _stats(conninfo)
    with psycopg.connect(conninfo) as conn:
        plan = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + QUIET_SQL, {"source": source})]
    return {"history": turns, "made_s": made_s, "read": read, "record_s": record_s, "quiet": len(quiet),
            "quiet_s": quiet_s, "plan": plan,
            "record_rows": {t: tuple(mid[t][i] - before[t][i] for i in range(2)) for t in TABLES},
            "quiet_rows": {t: tuple(after[t][i] - mid[t][i] for i in range(2)) for t in TABLES}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,3000000")
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="judgeflow-bench-sessions-"))
    pg = EmbeddedPostgres(workdir / "pg")
    pg.start()
    os.environ["PGPASSFILE"] = str(pg.password_file)
    try:
        rows = [_case(pg, i, int(size), args.sessions) for i, size in enumerate(args.sizes.split(","))]
    finally:
        pg.stop()
    print("| history turns | new turns read | record s | quiet sessions | search s | search rows read "
          "(seq, idx) sessions | search shared buffers |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        buffers = next((line.strip() for line in r["plan"] if "Buffers" in line), "")
        print(f"| {r['history']:,} | {r['read']:,} | {r['record_s']:.1f} | {r['quiet']:,} | {r['quiet_s']:.2f} | "
              f"{r['quiet_rows']['sessions']} | {buffers} |")
    for r in rows:
        print(f"\nhistory {r['history']:,}: recording read (seq, idx) {r['record_rows']}")
        print("\n".join(r["plan"]))


if __name__ == "__main__":
    main()
