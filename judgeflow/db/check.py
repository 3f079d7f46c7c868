"""`judgeflow db check`: is the trace source usable, indexed, and is
judgeflow's schema current?"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.exc import DBAPIError

from judgeflow.db import migrate
from judgeflow.db.engine import engine_for
from judgeflow.db.source import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, SourceTable
from judgeflow.db.unusable import count_unusable, describe
from judgeflow.errors import ConfigError, DatabaseError
from judgeflow.settings import Settings


@dataclass
class CheckReport:
    ok: bool = True
    findings: list[tuple[str, str]] = field(default_factory=list)

    def add(self, level: str, message: str) -> None:
        self.findings.append((level, message))
        if level == "MISSING":
            self.ok = False

    def lines(self) -> list[str]:
        return [f"[{level}] {message}" for level, message in self.findings]


def _check_rows(report: CheckReport, conn, source: SourceTable) -> None:
    """Rows runs skip or de-duplicate: reported (not MISSING: runs go on)."""
    try:
        with conn.begin_nested():
            rows = count_unusable(conn, source)
    except DBAPIError as exc:
        report.add("note", f"could not count unusable rows of {source.display}: {exc.orig}")
        return
    if not rows.any:
        report.add("ok", f"every row of {source.display} has an id and a created_at, and no id is repeated")
    for line in describe(source, rows):
        report.add("warn", line)


def check_database(settings: Settings) -> CheckReport:
    report = CheckReport()
    source = SourceTable.parse(settings.traces_table)
    engine = engine_for(settings)
    try:
        with engine.connect() as conn:
            columns = source.columns(conn)
            if not columns:
                report.add("MISSING", f"trace source {source.display} does not exist")
            else:
                report.add("ok", f"trace source {source.display} found")
                for name in REQUIRED_COLUMNS:
                    if name not in columns:
                        report.add("MISSING", f"required column {source.display}.{name}")
                for name in OPTIONAL_COLUMNS:
                    if name not in columns:
                        report.add("note", f"optional column {source.display}.{name} absent; read as NULL")
                if all(name in columns for name in ("id", "created_at")):
                    _check_rows(report, conn, source)
                indexed = source.created_at_indexed(conn)
                if indexed is None:
                    report.add("note", f"{source.display} is a view: make sure its base table has an index on created_at")
                elif indexed:
                    report.add("ok", f"index on {source.display}(created_at)")
                else:
                    report.add(
                        "MISSING",
                        f"index on {source.display}(created_at): CREATE INDEX ON {source.sql} (created_at);",
                    )
        current, head = migrate.current_revision(engine), migrate.head_revision()
    except DBAPIError as exc:
        raise DatabaseError(f"cannot check the database: {exc.orig}") from None
    except ConfigError:
        raise
    if current == head:
        report.add("ok", f"judgeflow schema at revision {head}")
    else:
        report.add("MISSING", f"judgeflow schema at {current or 'none'}, expected {head}: run `judgeflow db upgrade`")
    return report
