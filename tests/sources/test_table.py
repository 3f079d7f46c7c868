import pytest
import sqlalchemy as sa

from judgeflow.sources.table import SourceTable
from judgeflow.errors import ConfigError


@pytest.mark.parametrize("name", ["llm_traces", "analytics.traces_v2", "_x"])
def test_plain_identifiers_are_accepted(name):
    assert SourceTable.parse(name).display == name


@pytest.mark.parametrize(
    "name",
    ["llm_traces; DROP TABLE x", 'a"b', "a.b.c", "1abc", "", "tr aces", "public.", "x--", "t)"],
)
def test_anything_else_is_refused_with_a_clear_error(name):
    with pytest.raises(ConfigError, match="JUDGEFLOW_TRACES_TABLE"):
        SourceTable.parse(name)


def test_columns_and_missing_required_columns(db):
    with db.begin() as conn:
        conn.execute(sa.text("CREATE SCHEMA app"))
        conn.execute(sa.text("CREATE TABLE app.calls (id uuid, created_at timestamptz, answer text)"))
        conn.execute(sa.text("CREATE VIEW app.v AS SELECT id, created_at, answer AS output FROM app.calls"))
    with db.connect() as conn:
        table = SourceTable.parse("app.calls")
        with pytest.raises(ConfigError, match="lacks required column"):
            table.select_list(table.columns(conn))
        view = SourceTable.parse("app.v")
        select = view.select_list(view.columns(conn))
        assert "NULL::text AS input" in select and "NULL::jsonb AS context" in select
        assert view.created_at_indexed(conn) is None  # a view: its base table must be checked
        assert table.created_at_indexed(conn) is False
        with pytest.raises(ConfigError, match="does not exist"):
            missing = SourceTable.parse("nope")
            missing.select_list(missing.columns(conn))
