"""`judgeflow db check`: is the trace source usable, indexed, and is
judgeflow's schema current?"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.exc import DBAPIError

from judgeflow.db import migrate
from judgeflow.db.engine import database_url, engine_for
from judgeflow.db.pooling import detect_pooling_at
from judgeflow.db.trace_source import source_engine, trace_source
from judgeflow.db.unusable import describe
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


def _check_rows(report: CheckReport, conn, source, *, full: bool) -> None:
    """Rows runs skip or de-duplicate: reported (not MISSING: runs go on)."""
    try:
        with conn.begin_nested():
            rows = source.unusable(conn, lo=None, full=full, timeout_s=60.0)
    except DBAPIError as exc:
        report.add("note", f"could not count unusable rows of {source.display}: {exc.orig}")
        return
    if not rows.any:
        report.add("ok", f"every row of {source.display} has an id and a created_at, and no id is repeated")
    for line in describe(source, rows):
        report.add("warn", line)


def _check_pooling(report: CheckReport, settings: Settings) -> None:
    """What is between judgeflow and PostgreSQL, and what runs do about it."""
    try:
        pooling = detect_pooling_at(database_url(settings))
    except DBAPIError as exc:
        report.add("note", f"could not tell whether a connection pooler is in the way: {exc.orig}")
        return
    report.add("ok", f"connection: {pooling.mode} ({pooling.evidence}); {pooling.consequence}")


def check_database(settings: Settings, *, full: bool = False) -> CheckReport:
    report = CheckReport()
    source = trace_source(settings)
    engine = engine_for(settings)
    try:
        with source_engine(settings).connect() as conn:
            lines = source.check(conn)
            for level, message in lines:
                report.add(level, message)
            if not any(level == "MISSING" for level, _ in lines):
                _check_rows(report, conn, source, full=full)
        current, head = migrate.current_revision(engine), migrate.head_revision()
    except DBAPIError as exc:
        raise DatabaseError(f"cannot check the database: {exc.orig}") from None
    except ConfigError:
        raise
    if current == head:
        report.add("ok", f"judgeflow schema at revision {head}")
    else:
        report.add("MISSING", f"judgeflow schema at {current or 'none'}, expected {head}: run `judgeflow db upgrade`")
    _check_pooling(report, settings)
    return report
