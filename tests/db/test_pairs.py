"""The plans of a nightly run's reads on tables large enough that a scan of
the whole history would be chosen by the previous version's query: the key
read is an index range scan of the window with a bounded row estimate, and
each pair is looked up by eval_results' primary key. The 1M-row version of
this, through the real flow, is bench/reads.py (slow test below)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.db.pairs import _KEYS, Done, _pending_pairs
from judgeflow.sources.table import SourceTable, TableSource
from judgeflow.sources.trace_source import KeyFilter

N = 100_000


@pytest.fixture
def history(db):
    migrate.upgrade(db)
    with db.begin() as conn:
        conn.exec_driver_sql("SET LOCAL search_path TO public")
        conn.exec_driver_sql(
            "CREATE TABLE llm_traces (id text PRIMARY KEY, created_at timestamptz NOT NULL, input text, "
            "output text, context jsonb, metadata jsonb)"
        )
        conn.exec_driver_sql("CREATE INDEX llm_traces_created_at_idx ON llm_traces (created_at)")
        conn.exec_driver_sql(
            f"INSERT INTO llm_traces SELECT 'h-' || lpad(i::text, 7, '0'), "
            f"timestamptz '2026-10-01' + i * interval '20 seconds', 'q', 'an answer of some length', NULL, '{{}}' "
            f"FROM generate_series(1, {N}) AS i"
        )
        conn.exec_driver_sql(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, trace_created_at) "
            "SELECT t.id, m.metric, 'scored', 0, t.created_at FROM llm_traces t "
            "CROSS JOIN (VALUES ('toxicity'), ('hallucination')) AS m(metric)"
        )
    with db.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql("ANALYZE llm_traces")
        conn.exec_driver_sql("ANALYZE judgeflow.eval_results")
        newest = conn.execute(sa.text("SELECT max(created_at) FROM llm_traces")).scalar_one()
    return newest


def _plan(conn, sql: str, params: dict) -> dict:
    return conn.execute(sa.text(f"EXPLAIN (FORMAT JSON) {sql}"), params).scalar_one()[0]["Plan"]


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_the_window_is_read_through_the_created_at_index_and_pairs_by_primary_key(db, history):
    from judgeflow.db.pending import pending_where

    source = TableSource(SourceTable.parse("llm_traces"))
    with db.connect() as conn:
        # the previous version's pending query reads the whole history: big enough to matter
        where, params = pending_where(max_failed_runs=3)
        old = _plan(conn, "SELECT count(*) FROM llm_traces t CROSS JOIN unnest(CAST(:metrics AS text[])) "
                          f"AS m(metric) WHERE {where}", {**params, "metrics": ["toxicity", "hallucination"]})
        assert any(n["Node Type"] == "Seq Scan" for n in _nodes(old)), json.dumps(old)[:2000]

        # the key read of a nightly run: its window (the watermark minus an hour), by the index
        sql, params = source.keys_sql(KeyFilter(lo=history - timedelta(hours=1)))
        keys_plan = _plan(conn, sql, {**params, "limit": 4000})
        scans = [n for n in _nodes(keys_plan) if n.get("Relation Name") == "llm_traces"]
        assert scans and all(n["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan")
                             for n in scans), json.dumps(keys_plan)[:2000]
        assert all(n["Plan Rows"] <= 1000 for n in scans), [n["Plan Rows"] for n in scans]  # ~180 rows an hour

        # the pairs of 1,000 keys: each looked up by eval_results' primary key, never a scan of it
        ids = [r[0] for r in conn.execute(sa.text(f"{sql.replace(':limit', '1000')}"), params).all()]
        pending, p = _pending_pairs(Done(max_failed_runs=3))
        probe = _plan(conn, f"WITH {_KEYS} SELECT count(*) FROM ({pending}) q",
                      {**p, "k_ids": ids, "metrics": ["toxicity", "hallucination"]})
        results_scans = [n for n in _nodes(probe) if n.get("Relation Name") == "eval_results"]
        assert results_scans and all(n["Node Type"] in ("Index Scan", "Index Only Scan")
                                     and n["Index Name"] == "eval_results_pkey" for n in results_scans), \
            json.dumps(probe)[:3000]


@pytest.mark.slow
def test_a_nightly_run_over_a_million_scored_traces_reads_only_its_window():
    """bench/reads.py at 1M scored traces + 1,000 new: the run scores the new
    ones and no statement of it scans the source or eval_results."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "bench.reads", "--sizes", "1000000"], cwd=root,
                         capture_output=True, text=True, timeout=3000)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    figures = eval(next(line for line in out.stdout.splitlines() if line.startswith("{'n'")))  # noqa: S307
    assert figures["score_rc"] == 0 and figures["scored"] == "1000"
    # the bench prints every statement that scanned either table: none scans the source, and the only
    # ones that may scan eval_results are the trend's and the alert rules' windows (14 days / the alert
    # window and baseline: half of this 30-day history, where the planner may prefer a scan), never the
    # reads that find, claim or count work
    scans = out.stdout.split("SEQ SCAN " + "-" * 71)[1:]
    assert all("Seq Scan on llm_traces" not in p for p in scans), scans
    assert all("trace_created_at >= $" in p for p in scans), scans
    assert figures["after"]["llm_traces"]["seq_scan"] == 0
    assert figures["status_inproc_s"] < 1.0, figures
