"""`judgeflow db check`: is the trace source usable, indexed, and is
judgeflow's schema current? Also the result rollup, what sits in front of
PostgreSQL and, with the Phoenix write-back on, whether Phoenix answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.exc import DBAPIError

from judgeflow.db import migrate
from judgeflow.db.engine import database_url, engine_for, source_engine
from judgeflow.db.pooling import detect_pooling_at
from judgeflow.sources.trace_source import trace_source
from judgeflow.sources.unusable import describe
from judgeflow.errors import ConfigError, DatabaseError
from judgeflow.config.settings import Settings


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


def _check_rows(report: CheckReport, conn, source, *, lo, full: bool) -> None:
    """Rows runs skip or de-duplicate: reported (not MISSING: runs go on)."""
    try:
        with conn.begin_nested():
            rows = source.unusable(conn, lo=lo, full=full, timeout_s=60.0)
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
        pooling = detect_pooling_at(database_url(settings), settings)
    except DBAPIError as exc:
        report.add("note", f"could not tell whether a connection pooler is in the way: {exc.orig}")
        return
    report.add("ok", f"connection: {pooling.mode} ({pooling.evidence}); {pooling.consequence}")


UNREADABLE_MARK = "could not be read from the source"
READ_CHECK_KEYS = 2000  # rows of the next run's window db check reads back


def _check_readable(report: CheckReport, settings: Settings, source, lo, engine) -> None:
    """Rows whose columns the database cannot read: those runs recorded
    (failed, invalid_trace) and those it finds reading back the start of the
    next run's window (up to READ_CHECK_KEYS rows)."""
    from judgeflow.db.pairs import key_pages
    from judgeflow.db.work_counts import unreadable_traces
    from judgeflow.sources.trace_source import KeyFilter, read_bodies, row_error

    found: dict[str, str] = {}
    try:
        with engine.connect() as conn:
            found.update(unreadable_traces(conn, UNREADABLE_MARK))
    except DBAPIError:
        pass  # no schema yet: reported below
    try:
        reader = source_engine(settings)
        keys = next(key_pages(source, reader, KeyFilter(lo=lo), page=READ_CHECK_KEYS), [])
        found.update(read_bodies(source, reader, keys).errors)
    except DBAPIError as exc:
        report.add("warn", f"could not read rows of {source.display} back: {type(exc.orig).__name__}: {exc.orig}"
                   + ("; reading only id and created_at failed on a row's value: PostgreSQL evaluates a view's "
                      "columns computed by VOLATILE functions even when they are not selected; declare such "
                      "functions STABLE or IMMUTABLE" if row_error(exc) else ""))
    if not found:
        return
    listed = "; ".join(f"{t}: {e}" for t, e in sorted(found.items())[:20])
    report.add("warn", f"{len(found)} row(s) of {source.display} cannot be read (each is stored as a failed "
                       f"result, error_kind invalid_trace; the other rows are scored): {listed}"
                       + (" ..." if len(found) > 20 else "")
                       + "; list them: SELECT trace_id, metric, error FROM judgeflow.eval_results "
                         "WHERE error_kind = 'invalid_trace';")


def check_database(settings: Settings, *, full: bool = False) -> CheckReport:
    report = CheckReport()
    source = trace_source(settings)
    engine = engine_for(settings)
    lo = None  # the next nightly run's window: from its watermark, else the whole source
    try:
        from judgeflow.db.watermark import plan_reads
        from judgeflow.metrics.registry import trace_metric_names

        with engine.connect() as conn:
            lo = plan_reads(conn, source, trace_metric_names(), lookback_s=settings.source_lookback_s).lo
    except DBAPIError:
        pass  # no schema yet (reported below): the whole source
    try:
        with source_engine(settings).connect() as conn:
            lines = source.check(conn)
            for level, message in lines:
                report.add(level, message)
            usable = not any(level == "MISSING" for level, _ in lines)
            if usable:
                _check_rows(report, conn, source, lo=lo, full=full)
        if usable:
            _check_readable(report, settings, source, lo, engine)
        current, head = migrate.current_revision(engine), migrate.head_revision()
    except DBAPIError as exc:
        raise DatabaseError(f"cannot check the database: {exc.orig}") from None
    except ConfigError:
        raise
    if current == head:
        report.add("ok", f"judgeflow schema at revision {head}")
    else:
        report.add("MISSING", f"judgeflow schema at {current or 'none'}, expected {head}: run `judgeflow db upgrade`")
    if current == head:
        _check_rollup(report, engine, full=full)
    _check_pooling(report, settings)
    _check_write_back(report, settings)
    return report


def _check_rollup(report: CheckReport, engine, *, full: bool) -> None:
    """Whether the result rollup holds every hour (`judgeflow db rollup` builds
    the rest), a segment key that explodes, and with ``full`` whether its lines
    equal the results counted again."""
    from judgeflow.db.epochs import when
    from judgeflow.db.rollup import differences, exploding_keys, rollup_state, window_index_covers

    try:
        with engine.connect() as conn:
            state = rollup_state(conn)
            if state is None:
                return
            if state.built:
                report.add("ok", "result rollup current: every trace hour is kept on write")
            else:
                report.add("warn", f"result rollup built for trace hours from {when(state.built_from)} on; "
                                   f"{state.hours_left()} older hour(s) are still counted from the results "
                                   "(exact, slower): run `judgeflow db rollup` to build them")
            if not window_index_covers(conn):
                report.add("warn", "the window index lacks source and trace id (a database upgraded with many "
                                   "results): the hours a period boundary cuts are read from the table; "
                                   "run `judgeflow db rollup` to build it concurrently")
            for key, values in exploding_keys(conn):
                report.add("warn", f"segment key {key!r} has {values:,} values in the result rollup (one line per "
                                   "value and hour): an id rather than a segment? Remove it from "
                                   "JUDGEFLOW_ALERT_SEGMENT_BY or the metrics file's segment_by; rules keep its "
                                   "top N values and 'other'")
            if not full:
                return
            wrong = differences(conn)
    except DBAPIError as exc:
        report.add("warn", f"could not read the result rollup: {exc.orig}")
        return
    if not wrong:
        report.add("ok", "result rollup recomputed from the results (--full): every line equal")
        return
    first = "; ".join(f"{m} {when(h)} {k or 'overall'}: {raw} results, rollup {kept}"
                      for m, h, k, raw, kept in wrong[:5])
    report.add("MISSING", f"result rollup differs from the results in {len(wrong)} line(s) ({first}): "
                          "run `judgeflow db rollup --rebuild`")


def _check_write_back(report: CheckReport, settings: Settings) -> None:
    """With the Phoenix write-back on: Phoenix answers at JUDGEFLOW_PHOENIX_URL and
    accepts the key (a harmless read of its REST API)."""
    if not (settings.source == "phoenix" and settings.phoenix_write_back):
        return
    from judgeflow.phoenix.annotations import check_access

    api_key = settings.phoenix_api_key.get_secret_value() if settings.phoenix_api_key else None
    report.add(*check_access(settings.phoenix_url, api_key))
