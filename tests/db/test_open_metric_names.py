"""Migration 13_open_metric_names.py: eval_results takes any registered
metric's results; a database at 12_sample_weights.py migrates with its rows, and the
downgrade puts the old check back."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from judgeflow.db import migrate

INSERT = sa.text("INSERT INTO judgeflow.eval_results (trace_id, metric, status) VALUES (:t, :m, 'skipped')")


def _to(db: sa.Engine, revision: str, direction: str) -> None:
    from alembic import command

    with db.begin() as conn:
        config = migrate._config()
        config.attributes["connection"] = conn
        getattr(command, direction)(config, revision)


def _checks(db: sa.Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(db).get_check_constraints("eval_results", schema="judgeflow")}


def test_an_existing_database_opens_to_any_metric_and_back(empty_db):
    db = empty_db
    _to(db, "0012", "upgrade")
    with db.begin() as conn:
        conn.execute(INSERT, {"t": "old", "m": "toxicity"})
    with pytest.raises(sa.exc.IntegrityError):
        with db.begin() as conn:
            conn.execute(INSERT, {"t": "new", "m": "rudeness"})
    assert "eval_results_metric_check" in _checks(db)

    assert migrate.upgrade(db) == migrate.head_revision()
    assert "eval_results_metric_check" not in _checks(db)
    with db.begin() as conn:
        conn.execute(INSERT, {"t": "new", "m": "rudeness"})
        stored = conn.execute(sa.text("SELECT trace_id, metric FROM judgeflow.eval_results ORDER BY 1")).all()
    assert stored == [("new", "rudeness"), ("old", "toxicity")]

    with pytest.raises(sa.exc.IntegrityError):  # a row of another metric is still stored
        _to(db, "0012", "downgrade")
    with db.begin() as conn:
        conn.execute(sa.text("DELETE FROM judgeflow.eval_results WHERE metric = 'rudeness'"))
    _to(db, "0012", "downgrade")
    assert "eval_results_metric_check" in _checks(db)
    assert migrate.upgrade(db) == migrate.head_revision()
