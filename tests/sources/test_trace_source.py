"""The trace source interface against a real PostgreSQL: keys come from the
created_at index alone, and rows a view cannot read are isolated by
splitting, each with the database's own message."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from judgeflow.sources.table import SourceTable, TableSource
from judgeflow.sources.trace_source import KeyFilter, TraceKey, read_bodies
from tests.support.traces import BASE_TIME

# rows 7 and 23: input does not cast; 11: context's JSON path fails; 17: metadata divides by zero
BAD_INPUT, BAD_CONTEXT, BAD_METADATA = {7, 23}, {11}, {17}


@pytest.fixture
def raw_logs(db):
    with db.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE raw_logs (id text, created_at timestamptz, prompt text, completion text, "
            "chunks text, divisor int)"
        )
        conn.exec_driver_sql("CREATE INDEX ON raw_logs (created_at)")
        conn.execute(
            sa.text("INSERT INTO raw_logs VALUES (:id, :at, :prompt, :completion, :chunks, :divisor)"),
            [
                {"id": f"r-{i:03d}", "at": BASE_TIME + timedelta(minutes=i),
                 "prompt": "not-a-number" if i in BAD_INPUT else str(i), "completion": f"answer {i}",
                 "chunks": "{broken" if i in BAD_CONTEXT else '{"docs": ["a", "b"]}',
                 "divisor": 0 if i in BAD_METADATA else 1}
                for i in range(40)
            ],
        )
        # a view over raw logs whose expressions fail for some rows, each in another column
        conn.exec_driver_sql(
            """
            CREATE VIEW llm_traces AS
            SELECT id, created_at, prompt::int::text AS input, completion AS output,
                   (chunks::jsonb) -> 'docs' AS context, jsonb_build_object('share', 10 / divisor) AS metadata
            FROM raw_logs
            """
        )
    return TableSource(SourceTable.parse("llm_traces"))


def _keys(db, source, f: KeyFilter, limit=None):
    sql, params = source.keys_sql(f)
    with db.connect() as conn:
        return [TraceKey(*r) for r in conn.execute(sa.text(sql), {**params, "limit": limit}).all()]


def test_keys_read_only_the_key_and_the_time_so_a_failing_column_does_not_stop_them(db, raw_logs):
    keys = _keys(db, raw_logs, KeyFilter())
    assert [k.id for k in keys] == [f"r-{i:03d}" for i in range(40)]
    window = _keys(db, raw_logs, KeyFilter(lo=BASE_TIME + timedelta(minutes=30), sample_rate=1.0), limit=5)
    assert [k.id for k in window] == [f"r-{i:03d}" for i in range(30, 35)]
    after = _keys(db, raw_logs, KeyFilter(after=(keys[3].created_at, keys[3].id)), limit=2)
    assert [k.id for k in after] == ["r-004", "r-005"]
    sampled = _keys(db, raw_logs, KeyFilter(sample_rate=0.5))
    assert 5 < len(sampled) < 35 and sampled == _keys(db, raw_logs, KeyFilter(sample_rate=0.5))


def test_a_read_that_fails_is_split_until_each_failing_row_is_alone(db, raw_logs):
    keys = _keys(db, raw_logs, KeyFilter())
    with db.connect() as conn, pytest.raises(sa.exc.DBAPIError):
        raw_logs.bodies(conn, keys)  # read at once, the batch fails

    got = read_bodies(raw_logs, db, keys)

    bad = BAD_INPUT | BAD_CONTEXT | BAD_METADATA
    assert set(got.errors) == {f"r-{i:03d}" for i in bad}
    assert set(got.bodies) == {f"r-{i:03d}" for i in range(40) if i not in bad}
    assert "invalid input syntax for type integer" in got.errors["r-007"]
    assert "invalid input syntax for type json" in got.errors["r-011"]
    assert "division by zero" in got.errors["r-017"]
    body = got.bodies["r-005"]
    assert (body.input, body.output, body.context, body.metadata) == ("5", "answer 5", ["a", "b"], {"share": 10})
    assert got.statements < 40  # split, not read one by one


def test_an_error_that_is_no_rows_fault_is_raised_not_recorded(db, raw_logs, database_url):
    keys = _keys(db, raw_logs, KeyFilter(), limit=3)
    with db.begin() as conn:
        conn.exec_driver_sql("CREATE VIEW slow_traces AS SELECT id, created_at, completion AS output, "
                             "(pg_sleep(0.2) IS NULL)::text AS input FROM raw_logs")
    slow = TableSource(SourceTable.parse("slow_traces"))
    # a statement cancelled by its timeout (SQLSTATE 57014) says nothing about a row
    impatient = sa.create_engine(database_url, connect_args={"options": "-c statement_timeout=50"})
    try:
        with pytest.raises(sa.exc.DBAPIError, match="statement timeout"):
            read_bodies(slow, impatient, keys)
    finally:
        impatient.dispose()
