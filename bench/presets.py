"""Reading a source preset at scale: 1,000,000 source rows plus 1,000 new ones.

For each preset (``litellm``: LiteLLM's ``"LiteLLM_SpendLogs"`` made by the proxy's own
migrations; ``phoenix``: Phoenix's tables made by a real Phoenix server, stopped before the
load, needing ``.venv-phoenix/``), it fills the table with SQL (``generate_series``), adds
1,000 new rows at the end, ``VACUUM ANALYZE``s, then reads the new rows the way a run does:
keys from a lower bound (the watermark) in batches of 500, then the bodies of each batch.
Reported per read: ``EXPLAIN (ANALYZE, BUFFERS)``'s top plan nodes, time, buffers, and the
source table's sequential scans and tuples read (``pg_stat_user_tables``) over the whole read.
Phoenix is measured with Phoenix's own indexes only, then with the LLM-span index `db check`
asks for.

    .venv/bin/python -m bench.presets [--rows 1000000] [--only litellm|phoenix]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
from sqlalchemy import create_engine, text

from judgeflow.sources.litellm import LiteLLMSource
from judgeflow.sources.phoenix import PhoenixSource
from judgeflow.sources.trace_source import KeyFilter, TraceKey

NEW = 1000
BATCH = 500
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _plan_summary(lines: list[str]) -> str:
    nodes = [re.sub(r"\s+\(cost=.*", "", l.strip().lstrip("-> ")) for l in lines if "cost=" in l][:4]
    timing = next((l.strip() for l in lines if l.strip().startswith("Execution Time")), "")
    buffers = next((l.strip() for l in lines if l.strip().startswith("Buffers")), "")
    return f"{' / '.join(nodes)}; {buffers}; {timing}"


def _stats(conn, table: str) -> tuple[int, int, int, int]:
    conn.execute(text("SELECT pg_stat_clear_snapshot()"))
    return conn.execute(
        text("SELECT seq_scan, COALESCE(seq_tup_read, 0), COALESCE(idx_scan, 0), COALESCE(idx_tup_fetch, 0) "
             "FROM pg_stat_user_tables WHERE relname = :t"),
        {"t": table},
    ).one()


def read_like_a_run(engine, source, table: str, lo: datetime) -> dict:
    """Keys from ``lo`` in batches, bodies per batch; plans of the first batch."""
    out: dict = {}
    with engine.connect() as stats_conn, engine.connect() as conn:
        stats_conn = stats_conn.execution_options(isolation_level="AUTOCOMMIT")
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # each read flushes its statistics
        time.sleep(1.5)  # statistics reach the views at most once a second
        before = _stats(stats_conn, table)
        started = time.perf_counter()
        keys_read, bodies_read, after = 0, 0, None
        while True:
            sql, params = source.keys_sql(KeyFilter(lo=lo, after=after))
            keys = [TraceKey(*r) for r in conn.execute(text(sql), {**params, "limit": BATCH}).all()]
            if not keys:
                break
            if "keys_plan" not in out:
                out["keys_plan"] = _plan_summary(conn.execute(
                    text("EXPLAIN (ANALYZE, BUFFERS) " + sql), {**params, "limit": BATCH}).scalars().all())
            keys_read += len(keys)
            bodies_read += len(source.bodies(conn, keys))
            after = (keys[-1].created_at, keys[-1].id)
        out["read_s"] = time.perf_counter() - started
        time.sleep(1.5)
        after_stats = _stats(stats_conn, table)
        out["keys"], out["bodies"] = keys_read, bodies_read
        out["seq_scans"] = after_stats[0] - before[0]
        out["seq_tup_read"] = after_stats[1] - before[1]
        out["idx_scans"] = after_stats[2] - before[2]
        out["idx_tup_fetch"] = after_stats[3] - before[3]
    return out


def bench_litellm(admin: str, conninfo_for, url_for, rows: int) -> dict:
    from tests.support.litellm_proxy import create_template_database

    name = create_template_database(admin, conninfo_for)
    with psycopg.connect(conninfo_for(name), autocommit=True) as pg:
        started = time.perf_counter()
        for lo in range(0, rows + NEW, 250_000):
            hi = min(lo + 250_000, rows + NEW)
            pg.execute(
                """INSERT INTO "LiteLLM_SpendLogs" (request_id, call_type, "startTime", "endTime", model, model_group,
                       team_id, end_user, request_tags, status, cache_hit, proxy_server_request, response)
                   SELECT 'chatcmpl-' || i, 'acompletion', %(t0)s + i * interval '1 second',
                          %(t0)s + i * interval '1 second', 'gpt-4o', 'gpt-4o', 'team-' || (i %% 7), 'user-' || (i %% 1000),
                          '["prod"]'::jsonb, 'success', 'False',
                          jsonb_build_object('messages', jsonb_build_array(jsonb_build_object('role', 'user',
                              'content', 'question number ' || i))),
                          jsonb_build_object('choices', jsonb_build_array(jsonb_build_object('message',
                              jsonb_build_object('role', 'assistant', 'content', 'answer number ' || i))))
                   FROM generate_series(%(lo)s, %(hi)s - 1) i""",
                {"t0": T0.replace(tzinfo=None), "lo": lo, "hi": hi},
            )
        pg.execute('VACUUM ANALYZE "LiteLLM_SpendLogs"')
        load_s = time.perf_counter() - started
    engine = create_engine(url_for(name))
    try:
        lo = T0 + timedelta(seconds=rows)  # the first new row: the watermark
        result = read_like_a_run(engine, LiteLLMSource(), "LiteLLM_SpendLogs", lo)
    finally:
        engine.dispose()
    result["load_s"] = load_s
    return result


def bench_phoenix(admin: str, conninfo_for, url_for, rows: int, workdir: Path) -> list[dict]:
    from tests.support.phoenix import PhoenixServer, ensure_venv

    name = "bench_phoenix"
    with psycopg.connect(admin, autocommit=True) as pg:
        pg.execute(f'DROP DATABASE IF EXISTS "{name}"')
        pg.execute(f'CREATE DATABASE "{name}"')
    asyncpg_url = url_for(name).replace("postgresql+psycopg://", "postgresql://")
    with PhoenixServer(ensure_venv(), asyncpg_url, workdir / "phoenix"):
        pass  # Phoenix's migrations make its tables; the load is SQL
    traces = (rows + 2) // 3 + NEW  # a CHAIN, a RETRIEVER and an LLM span per trace
    with psycopg.connect(conninfo_for(name), autocommit=True) as pg:
        started = time.perf_counter()
        pg.execute("INSERT INTO projects (name) VALUES ('default') ON CONFLICT DO NOTHING")
        pg.execute(
            """INSERT INTO traces (id, project_rowid, trace_id, start_time, end_time)
               SELECT i, (SELECT id FROM projects WHERE name = 'default'), md5(i::text), %(t0)s + i * interval '1 second',
                      %(t0)s + i * interval '1 second' + interval '900 ms'
               FROM generate_series(1, %(n)s) i""",
            {"t0": T0, "n": traces},
        )
        for kind, offset, attributes in (
            ("CHAIN", 0, "'{}'::jsonb"),
            ("RETRIEVER", 100, """jsonb_build_object('retrieval', jsonb_build_object('documents', jsonb_build_array(
                 jsonb_build_object('document', jsonb_build_object('content', 'document ' || i)))))"""),
            ("LLM", 300, """jsonb_build_object('llm', jsonb_build_object(
                 'input_messages', jsonb_build_array(jsonb_build_object('message', jsonb_build_object('role', 'user',
                     'content', 'question ' || i))),
                 'output_messages', jsonb_build_array(jsonb_build_object('message', jsonb_build_object(
                     'role', 'assistant', 'content', 'answer ' || i)))))"""),
        ):
            pg.execute(
                f"""INSERT INTO spans (trace_rowid, span_id, parent_id, name, span_kind, start_time, end_time, attributes,
                        events, status_code, status_message, cumulative_error_count, cumulative_llm_token_count_prompt,
                        cumulative_llm_token_count_completion)
                    SELECT i, substr(md5(i::text || '{kind}'), 1, 16), NULL, '{kind.lower()}', '{kind}',
                           %(t0)s + i * interval '1 second' + interval '{offset} ms',
                           %(t0)s + i * interval '1 second' + interval '{offset + 200} ms',
                           {attributes}, '[]'::jsonb, 'OK', '', 0, 0, 0
                    FROM generate_series(1, %(n)s) i""",
                {"t0": T0, "n": traces},
            )
        pg.execute("VACUUM ANALYZE spans")
        pg.execute("VACUUM ANALYZE traces")
        load_s = time.perf_counter() - started
    engine = create_engine(url_for(name))
    results = []
    try:
        lo = T0 + timedelta(seconds=traces - NEW + 1)
        for with_index in (False, True):
            if with_index:
                with psycopg.connect(conninfo_for(name), autocommit=True) as pg:
                    pg.execute(PhoenixSource().key_index_sql)
                    pg.execute("VACUUM ANALYZE spans")
            result = read_like_a_run(engine, PhoenixSource(), "spans", lo)
            result.update(load_s=load_s, index="LLM-span index" if with_index else "Phoenix's indexes only",
                          spans=traces * 3)
            results.append(result)
    finally:
        engine.dispose()
    return results


def main(argv: list[str] | None = None) -> int:
    from tests.support.postgres import admin_conninfo, start_test_server

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--only", choices=["litellm", "phoenix"])
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="judgeflow-bench-presets-"))
    server = start_test_server()
    try:
        admin = admin_conninfo(server)

        def conninfo_for(name):
            return f"host=127.0.0.1 port={server.port} user=judgeflow dbname={name}"

        def url_for(name):
            return f"postgresql+psycopg://judgeflow@127.0.0.1:{server.port}/{name}"

        if args.only in (None, "litellm"):
            r = bench_litellm(admin, conninfo_for, url_for, args.rows)
            print(f"litellm: {args.rows:,} + {NEW:,} rows (load {r['load_s']:.0f} s): read {r['keys']} keys and "
                  f"{r['bodies']} bodies in {r['read_s'] * 1000:.0f} ms; seq scans {r['seq_scans']} "
                  f"({r['seq_tup_read']} tuples), index scans {r['idx_scans']} ({r['idx_tup_fetch']} tuples fetched)")
            print(f"  keys plan: {r['keys_plan']}")
        if args.only in (None, "phoenix"):
            for r in bench_phoenix(admin, conninfo_for, url_for, args.rows, workdir):
                print(f"phoenix ({r['index']}): {r['spans']:,} spans (load {r['load_s']:.0f} s): read {r['keys']} keys "
                      f"and {r['bodies']} bodies in {r['read_s'] * 1000:.0f} ms; seq scans {r['seq_scans']} "
                      f"({r['seq_tup_read']} tuples), index scans {r['idx_scans']} ({r['idx_tup_fetch']} tuples fetched)")
                print(f"  keys plan: {r['keys_plan']}")
    finally:
        server.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
