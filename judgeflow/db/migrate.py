"""Schema migrations, run from code under an advisory lock so concurrent
flow runs (or a flow and `judgeflow db upgrade`) never race each other."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from judgeflow.db.schema import SCHEMA
from judgeflow.errors import DatabaseError

_MIGRATIONS = Path(__file__).with_name("migrations")
# arbitrary but fixed: the key of judgeflow's migration advisory lock
_LOCK_KEY = 0x6A756467
# A migration step waiting for a table lock holds up every writer queued
# behind it (scoring included) for as long as it waits: behind a VACUUM or a
# long transaction it gives up soon and the whole migration is tried again
# later, so writers never wait long for it.
_LOCK_TIMEOUT = "500ms"
_LOCK_RETRY_FOR_S = 600.0
_LOCK_NOT_AVAILABLE = "55P03"

log = logging.getLogger("judgeflow.db")


if TYPE_CHECKING:
    from alembic.config import Config

# alembic is imported only when there is something to migrate: every scoring
# run checks the schema, and importing alembic and loading the migration
# scripts costs more CPU than the rest of a run with nothing to score.
_REVISION = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*['\"]?([^'\"\s]+)['\"]?", re.M)


def _config() -> "Config":
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def _head_from_files() -> str | None:
    """The head read straight from the version files (one linear chain), or
    None when the files do not look like one: then alembic decides."""
    revisions, parents = set(), set()
    for path in (_MIGRATIONS / "versions").glob("*.py"):
        found = dict(_REVISION.findall(path.read_text()))
        if "revision" not in found:
            return None
        revisions.add(found["revision"])
        if found.get("down_revision", "None") != "None":
            parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _stored_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        if not conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"{SCHEMA}.alembic_version"}).scalar():
            return None
        rows = conn.execute(text(f"SELECT version_num FROM {SCHEMA}.alembic_version")).scalars().all()
    return rows[0] if len(rows) == 1 else None


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        exists = conn.execute(
            text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"{SCHEMA}.alembic_version"}
        ).scalar()
        if not exists:
            return None
        from alembic.runtime.migration import MigrationContext

        ctx = MigrationContext.configure(conn, opts={"version_table_schema": SCHEMA})
        return ctx.get_current_revision()


def upgrade(engine: Engine, revision: str = "head", *, retry_for_s: float = _LOCK_RETRY_FOR_S) -> str:
    """Bring judgeflow's schema to ``revision``; returns the revision reached. A
    table lock not granted at once (a VACUUM, a long transaction) makes it try
    again for up to ``retry_for_s`` seconds, writers going on meanwhile."""
    if revision == "head":
        try:
            stored = _stored_revision(engine)
        except OperationalError as exc:
            raise DatabaseError(f"cannot migrate judgeflow's schema: {exc.orig}") from None
        if stored is not None and stored == _head_from_files():
            return stored
    deadline = time.monotonic() + retry_for_s
    pause = 0.5
    while True:
        try:
            _upgrade_once(engine, revision)
            break
        except OperationalError as exc:
            if getattr(exc.orig, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
                raise DatabaseError(f"cannot migrate judgeflow's schema: {exc.orig}") from None
            if time.monotonic() + pause > deadline:
                raise DatabaseError("cannot migrate judgeflow's schema: another session kept a lock on one of its "
                                    "tables (a VACUUM or a long transaction?) for the whole time; try again") from None
            log.warning("a table judgeflow migrates is locked by another session; trying again in %.1f s", pause)
            time.sleep(pause)
            pause = min(pause * 2, 10.0)
    return current_revision(engine) or ""


def _upgrade_once(engine: Engine, revision: str) -> None:
    """One attempt, in one transaction; a lock not granted at once fails it (lock_not_available)."""
    from alembic import command

    with engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
        # after the advisory lock: a second migrator waits for the first, however long it takes
        conn.execute(text(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'"))
        config = _config()
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
