"""Each source kind's session keys (docs/metrics.md, "Conversations"): the table source's metadata
key, Phoenix's `session.id` span attribute; in key order, an empty or missing value in no session,
a table without metadata in none at all (the litellm preset's: tests/sources/test_litellm.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from judgeflow.sources.phoenix import PhoenixSource
from judgeflow.sources.table import SourceTable, TableSource
from judgeflow.sources.trace_source import KeyFilter

T = datetime(2026, 11, 1, tzinfo=timezone.utc)


def test_the_table_source_reads_its_metadata_key_in_key_order(db):
    with db.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE public.tr (id text, created_at timestamptz, output text, metadata jsonb)")
        conn.exec_driver_sql("CREATE TABLE public.bare (id text, created_at timestamptz, output text)")
        for i, meta in enumerate(['{"conv": "x"}', '{"conv": ""}', '{}', '{"conv": "x"}', '{"conv": 7}']):
            conn.exec_driver_sql("INSERT INTO public.tr VALUES (%s, %s, 'o', %s)",
                                 (f"t{i}", T + timedelta(seconds=-i), meta))
        rows = TableSource(SourceTable.parse("public.tr")).session_keys(conn, KeyFilter(), "conv", 10)
        assert [(r[0], r[2]) for r in rows] == [("t4", "7"), ("t3", "x"), ("t0", "x")]
        assert TableSource(SourceTable.parse("public.tr")).session_keys(conn, KeyFilter(lo=T), "conv", 10)[0][0] == "t0"
        assert TableSource(SourceTable.parse("public.bare")).session_keys(conn, KeyFilter(), "conv", 10) == []


def test_phoenix_reads_the_session_id_attribute_of_llm_spans(db):
    with db.begin() as conn:
        conn.exec_driver_sql("CREATE SCHEMA px")
        conn.exec_driver_sql("CREATE TABLE px.spans (span_id text, start_time timestamptz, span_kind text, "
                             "attributes jsonb)")
        chat = '{"session": {"id": "chat"}}'
        for i, (kind, attrs) in enumerate([("LLM", chat), ("CHAIN", chat), ("LLM", '{"session": {}}'), ("LLM", chat)]):
            conn.exec_driver_sql("INSERT INTO px.spans VALUES (%s, %s, %s, %s)", (f"s{i}", T + timedelta(seconds=i),
                                                                                kind, attrs))
        rows = PhoenixSource("px").session_keys(conn, KeyFilter(), "ignored", 10)
    assert [(r[0], r[2]) for r in rows] == [("s0", "chat"), ("s3", "chat")]
