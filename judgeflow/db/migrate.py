"""Schema migrations, run from code under an advisory lock so concurrent
flow runs (or a flow and `judgeflow db upgrade`) never race each other."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from judgeflow.db.schema import SCHEMA
from judgeflow.errors import DatabaseError

_MIGRATIONS = Path(__file__).with_name("migrations")
# arbitrary but fixed: the key of judgeflow's migration advisory lock
_LOCK_KEY = 0x6A756467


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def head_revision() -> str:
    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        exists = conn.execute(
            text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"{SCHEMA}.alembic_version"}
        ).scalar()
        if not exists:
            return None
        ctx = MigrationContext.configure(conn, opts={"version_table_schema": SCHEMA})
        return ctx.get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Bring judgeflow's schema to ``revision``; returns the revision reached."""
    try:
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            config = _config()
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except OperationalError as exc:
        raise DatabaseError(f"cannot migrate judgeflow's schema: {exc.orig}") from None
    return current_revision(engine) or ""
