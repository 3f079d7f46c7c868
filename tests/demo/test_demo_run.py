"""Loading the demo traces into a real PostgreSQL: a repeat load inserts
nothing and says so (issue 16: a repeat demo reported all 326 as new; after
the first run's migrations, the role-named ``judgeflow`` schema came first on
the search path and a second, empty ``judgeflow.llm_traces`` was filled)."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.demo import load_demo_traces
from judgeflow.demo.run import load_traces
from judgeflow.config.settings import Settings

NOW = datetime(2026, 11, 22, 9, 30, tzinfo=timezone.utc)


def test_a_repeat_load_reports_what_was_inserted(database_url, db, tmp_path):
    settings = Settings(_env_file=None, database_url=database_url, home=str(tmp_path))
    expected = len(load_demo_traces(NOW))

    assert load_traces(settings, now=NOW) == expected
    assert load_traces(settings, now=NOW) == 0
    # what the demo's scoring run does next: create the judgeflow schema (the
    # connecting role is also called judgeflow, so "$user" now names a schema)
    migrate.upgrade(db)
    assert load_traces(settings, now=NOW) == 0
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT to_regclass('judgeflow.llm_traces')")).scalar() is None

    with db.begin() as conn:
        conn.execute(sa.text("DELETE FROM llm_traces WHERE id IN (SELECT id FROM llm_traces ORDER BY id LIMIT 3)"))
    assert load_traces(settings, now=NOW) == 3
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM llm_traces")).scalar_one() == expected
        # absent context stays SQL NULL, not a JSON null
        nulls = conn.execute(sa.text("SELECT count(*) FROM llm_traces WHERE context IS NULL")).scalar_one()
        json_nulls = conn.execute(
            sa.text("SELECT count(*) FROM llm_traces WHERE jsonb_typeof(context) = 'null'")
        ).scalar_one()
    assert nulls == sum(row["context"] is None for row in load_demo_traces(NOW)) and nulls > 0
    assert json_nulls == 0
    with db.connect() as conn:
        kinds = conn.execute(sa.text("SELECT DISTINCT jsonb_typeof(metadata) FROM llm_traces")).scalars().all()
        first = conn.execute(sa.text("SELECT context, metadata FROM llm_traces WHERE id = 'demo-0001'")).one()
    assert kinds == ["object"]
    raw = next(row for row in load_demo_traces(NOW) if row["id"] == "demo-0001")
    assert (first.context, first.metadata) == (raw["context"], raw["metadata"])
