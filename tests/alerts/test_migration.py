"""Migration 02_alerts.py creates the alert tables and can be undone."""

from __future__ import annotations

import sqlalchemy as sa

from judgeflow.db import migrate


def tables(engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names(schema="judgeflow"))


def test_upgrade_downgrade_upgrade(empty_db):
    db = empty_db
    from alembic import command

    assert migrate.upgrade(db) == migrate.head_revision()
    assert {"alerts", "alert_events", "eval_results"} <= tables(db)
    columns = {c["name"] for c in sa.inspect(db).get_columns("alerts", schema="judgeflow")}
    assert {
        "rule", "state", "value", "threshold", "window", "sample_size", "opened_at", "resolved_at",
        "last_notified_at", "delivery_status", "delivered_at", "delivery_error", "delivery_attempts",
    } <= columns

    with db.begin() as conn:
        config = migrate._config()
        config.attributes["connection"] = conn
        command.downgrade(config, "0001")
    assert "alerts" not in tables(db) and "alert_events" not in tables(db)
    assert migrate.upgrade(db) == migrate.head_revision()
    assert {"alerts", "alert_events"} <= tables(db)


def test_states_are_constrained(db):
    import pytest

    migrate.upgrade(db)
    with pytest.raises(sa.exc.IntegrityError):
        with db.begin() as conn:
            conn.execute(sa.text("INSERT INTO judgeflow.alerts (rule, state) VALUES ('x', 'panicking')"))
