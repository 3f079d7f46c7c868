"""The ``litellm`` source preset over LiteLLM's own table and rows (see conftest.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from sqlalchemy import create_engine, text

from judgeflow.sources.litellm import LiteLLMSource
from judgeflow.sources.trace_source import KeyFilter, TraceKey
from tests.support.litellm_fixtures import by_scenario
from tests.support.litellm_proxy import insert_spend_logs

SOURCE = LiteLLMSource()


def _keys(conn, f: KeyFilter = KeyFilter(), limit: int = 1000) -> list[TraceKey]:
    sql, params = SOURCE.keys_sql(f)
    return [TraceKey(*row) for row in conn.execute(text(sql), {**params, "limit": limit}).all()]


@pytest.fixture
def loaded(litellm_db, spend_log_rows):
    url, conninfo = litellm_db
    assert insert_spend_logs(conninfo, spend_log_rows) == len(spend_log_rows)
    engine = create_engine(url)
    yield engine, conninfo
    engine.dispose()


def test_each_kind_of_logged_call_becomes_a_trace_or_a_reasoned_skip(loaded, spend_log_rows):
    engine, _ = loaded
    with engine.connect() as conn:
        keys = _keys(conn)
        bodies = SOURCE.bodies(conn, keys)
    assert len(keys) == len(spend_log_rows) == len(bodies)
    rows = by_scenario(spend_log_rows)
    body = {name: [bodies[r["request_id"]] for r in found] for name, found in rows.items()}

    single = body["single"][0]
    assert single.input == "What is the capital of France? reply: Paris is the capital of France."  # no system prompt
    assert single.output == "Paris is the capital of France." and single.skip is None and single.context is None
    assert single.metadata["team_id"] == "team-a" and single.metadata["end_user"] == "alice"
    assert single.metadata["tags"] == "chat,prod" and single.metadata["model_group"] == "app-model"
    assert single.metadata["model"] == "app-model"
    assert single.created_at.tzinfo is not None

    multi = body["multi_turn"][0]
    assert multi.input.startswith("user: My order is late.\n\nassistant: I am sorry to hear that.")
    assert multi.input.endswith("user: It is 1234, fix it now. reply: You are an idiot [toxic]. It ships today.")
    assert "support agent" not in multi.input
    assert multi.output == "You are an idiot [toxic]. It ships today."

    assert body["tool_call"][0].output is None
    assert body["tool_call"][0].skip == "the reply is a tool call (get_weather) with no text to judge"
    failure = body["failure"][0]
    assert failure.skip.startswith("the call failed at the proxy") and "overloaded" in failure.skip
    original, hit = body["cached"]
    assert original.skip is None and original.output == "Seven is a prime number."
    assert hit.skip.startswith("a cache hit") and original.id in hit.skip and hit.id != original.id
    assert body["streamed"][0].output == "Once upon a time a fox [halluc=0.75] flew." and body["streamed"][0].skip is None
    assert body["empty"][0].skip == "the reply is empty: no text to judge"
    assert "store_prompts_in_spend_logs" in body["unstored"][0].skip
    image = body["image"][0]
    assert image.input == "What is in this picture? reply: A cat sits on a mat.\n[image not shown]"
    assert image.output == "A cat sits on a mat."


def test_keys_oldest_first_and_bounded_in_utc_whatever_the_session_timezone(loaded, spend_log_rows):
    engine, _ = loaded
    expected = sorted(spend_log_rows, key=lambda r: (datetime.fromisoformat(r["startTime"]), r["request_id"]))
    with engine.connect() as conn:
        conn.execute(text("SET TIME ZONE 'America/New_York'"))
        keys = _keys(conn)
        assert [k.id for k in keys] == [r["request_id"] for r in expected]
        first = datetime.fromisoformat(expected[0]["startTime"]).astimezone(timezone.utc)
        assert abs(keys[0].created_at - first) < timedelta(milliseconds=1)
        # keyset paging and a lower bound, both in the source's own UTC wall time
        page = _keys(conn, KeyFilter(after=(keys[2].created_at, keys[2].id)), limit=2)
        assert page == keys[3:5]
        assert _keys(conn, KeyFilter(lo=keys[4].created_at)) == keys[4:]
        assert _keys(conn, KeyFilter(until=keys[4].created_at)) == keys[:4]


def test_db_check_reads_litellms_indexes_and_whether_prompts_are_stored(loaded, spend_log_rows):
    engine, conninfo = loaded
    with engine.connect() as conn:
        lines = SOURCE.check(conn)
    assert [level for level, _ in lines] == ["ok", "ok", "warn"], lines  # one 'unstored' call among them
    assert "LiteLLM_SpendLogs_startTime_request_id_idx" in lines[1][1]
    with psycopg.connect(conninfo, autocommit=True) as pg:
        # a proxy that does not store prompts: its calls have no request body
        pg.execute("""DELETE FROM "LiteLLM_SpendLogs" WHERE proxy_server_request <> '{}'::jsonb""")
        pg.execute('DROP INDEX "LiteLLM_SpendLogs_startTime_request_id_idx"')
    with engine.connect() as conn:
        lines = dict((message.split(":")[0], level) for level, message in SOURCE.check(conn))
        text_lines = [message for _, message in SOURCE.check(conn)]
    assert lines["LiteLLM is not storing prompts"] == "MISSING"
    assert any('CREATE INDEX CONCURRENTLY "LiteLLM_SpendLogs_startTime_request_id_idx"' in m for m in text_lines)
    with psycopg.connect(conninfo, autocommit=True) as pg:
        pg.execute('DROP INDEX "LiteLLM_SpendLogs_startTime_idx"')
    with engine.connect() as conn:
        index_line = [(lvl, m) for lvl, m in SOURCE.check(conn) if "CREATE INDEX" in m]
    assert index_line and index_line[0][0] == "MISSING"


def test_malformed_bodies_are_skipped_with_the_reason_and_a_repeated_id_read_once(loaded, spend_log_rows):
    engine, conninfo = loaded
    single = by_scenario(spend_log_rows)["single"][0]
    with psycopg.connect(conninfo, autocommit=True) as pg:
        # a partitioned spend-log table is keyed by (request_id, "startTime"): an id can repeat
        pg.execute('ALTER TABLE "LiteLLM_SpendLogs" DROP CONSTRAINT "LiteLLM_SpendLogs_pkey"')
        copy = dict(single, startTime=(datetime.fromisoformat(single["startTime"]) + timedelta(seconds=5)).isoformat(),
                    response=json.dumps({"choices": [{"message": {"content": "a later copy"}}]}))
        bad = dict(single, request_id="bad-1", proxy_server_request=json.dumps("just a string"))
        worse = dict(single, request_id="bad-2", response=json.dumps([1, 2]))
        worst = dict(single, request_id="bad-3", response=json.dumps({"choices": [{"message": ["not", "a", "message"]}]}))
        assert insert_spend_logs(conninfo, [copy, bad, worse, worst]) == 4
    with engine.connect() as conn:
        keys = _keys(conn)
        bodies = SOURCE.bodies(conn, keys)
        unusable = SOURCE.unusable(conn, lo=None, full=True, timeout_s=10)
    assert [k.id for k in keys].count(single["request_id"]) == 2  # the keys say so; the run claims it once
    assert bodies[single["request_id"]].output == "Paris is the capital of France."  # the earliest copy
    assert bodies["bad-1"].skip == "malformed LiteLLM spend-log row: proxy_server_request is a str, not an object"
    assert bodies["bad-2"].skip == "malformed LiteLLM spend-log row: response is a list, not an object"
    assert bodies["bad-3"].skip == "malformed LiteLLM spend-log row: the reply is a list, not a message object"
    assert (unusable.duplicate_ids, unusable.duplicate_copies) == (1, 1)


def test_keys_are_read_through_the_proxys_start_time_index(litellm_db):
    url, conninfo = litellm_db
    with psycopg.connect(conninfo, autocommit=True) as pg:
        pg.execute(
            """INSERT INTO "LiteLLM_SpendLogs" (request_id, call_type, "startTime", "endTime")
               SELECT 'r' || i, 'acompletion', timestamp '2026-01-01' + i * interval '1 second',
                      timestamp '2026-01-01' + i * interval '1 second'
               FROM generate_series(1, 20000) i"""
        )
        pg.execute('VACUUM ANALYZE "LiteLLM_SpendLogs"')
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            lo = datetime(2026, 1, 1, 5, tzinfo=timezone.utc)  # the last ~2,000 rows
            sql, params = SOURCE.keys_sql(KeyFilter(lo=lo, after=(lo, "r0")))
            plan = "\n".join(conn.execute(text("EXPLAIN " + sql), {**params, "limit": 500}).scalars())
    finally:
        engine.dispose()
    # one of the proxy's own "startTime" indexes, started at the bound: never the whole table
    assert "Seq Scan" not in plan and "Index Cond: " in plan and '"startTime" >= ' in plan, plan
    assert 'using "LiteLLM_SpendLogs_startTime_request_id_idx"' in plan or 'using "LiteLLM_SpendLogs_startTime_idx"' in plan


def test_sessions_are_the_proxys_session_id_column(loaded, spend_log_rows):
    """Conversations (docs/metrics.md): the preset's session is LiteLLM's session_id, empty or NULL none."""
    engine, _ = loaded
    with engine.begin() as conn:
        ids = [k.id for k in _keys(conn)]
        conn.execute(text('UPDATE "LiteLLM_SpendLogs" SET session_id = NULL'))
        conn.execute(text('UPDATE "LiteLLM_SpendLogs" SET session_id = :s WHERE request_id = ANY(:ids)'),
                     {"s": "chat-1", "ids": ids[:2]})
        conn.execute(text('UPDATE "LiteLLM_SpendLogs" SET session_id = \'\' WHERE request_id = :id'), {"id": ids[2]})
        rows = SOURCE.session_keys(conn, KeyFilter(), "session_id", 100)
        after = SOURCE.session_keys(conn, KeyFilter(after=(rows[0][1], rows[0][0])), "session_id", 100)
    assert [(r[0], r[2]) for r in rows] == [(ids[0], "chat-1"), (ids[1], "chat-1")]
    assert [r[0] for r in after] == [ids[1]]
