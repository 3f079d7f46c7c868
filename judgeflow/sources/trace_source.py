"""How judgeflow reads traces: one small interface, :class:`TraceSource`.

Everything judgeflow reads from the user's traces goes through a source, in
two steps, so that a row whose columns cannot be read never stops the others:

1. **keys**: ``keys_sql(KeyFilter)`` is one SELECT of ``id`` (as text) and
   ``created_at`` only, oldest first (``ORDER BY created_at, id``) and bounded
   by ``created_at`` so an index on it serves it. Claims, pending counts and
   the watermark (judgeflow/db/watermark.py) are built from keys alone.
2. **bodies**: ``bodies(conn, keys)`` reads the trace columns of the given
   keys (``created_at = ANY(...)``: the same index) in judgeflow's shape
   (:class:`TraceBody`). It may raise the database's error when some row
   cannot be read (a view's cast, JSON path or division failing for that row);
   :func:`read_bodies` then splits the keys until each failing row is alone
   and hands back its error, which the run stores as a ``failed`` result with
   ``error_kind`` ``invalid_trace``.

A source also reports on itself: ``unusable(conn, lo=..., full=...)`` counts
rows no run can use (NULL id, NULL created_at, repeated ids), in the window a
run reads (``lo``) or over everything (``full``, `judgeflow db check --full`);
``check(conn)`` gives `judgeflow db check` its lines about the source; and
``listing_sql()`` the SQL people run to list unusable rows.

Implementations: ``table`` (judgeflow/sources/table.py, :class:`~judgeflow.sources.table.TableSource`):
``JUDGEFLOW_TRACES_TABLE``, a table or view with judgeflow's columns; the presets
``litellm`` and ``phoenix`` (judgeflow/sources/), another tool's tables read in place. Another
kind of source (a preset mapping another tool's tables to judgeflow's trace)
implements the same methods and registers a factory in :data:`SOURCE_KINDS`.

Where the source lives: ``JUDGEFLOW_SOURCE_DATABASE_URL`` (a read replica,
say) or, unset, judgeflow's own database. A source is handed the connection or
engine it reads through and never builds one: engines are the database layer's
(:func:`judgeflow.db.engine.source_engine`). Keys and bodies are read there;
which pairs are done, claims and results live in judgeflow's database, so the
two are never joined in one statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Callable, Sequence

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

# the interface lives in trace_types (sources import it from there); re-exported for callers
from judgeflow.sources.types import KeyFilter, TraceBody, TraceKey, TraceSource, UnusableCounts  # noqa: F401
from judgeflow.config.settings import Settings


# kind -> factory(settings) -> TraceSource; JUDGEFLOW_SOURCE presets add theirs
SOURCE_KINDS: dict[str, Callable[[Settings], TraceSource]] = {}


def _table_source(settings: Settings) -> TraceSource:
    from judgeflow.sources.table import TableSource

    return TableSource.from_settings(settings)


def _litellm_source(settings: Settings) -> TraceSource:
    from judgeflow.sources.litellm import LiteLLMSource

    return LiteLLMSource.from_settings(settings)


def _phoenix_source(settings: Settings) -> TraceSource:
    from judgeflow.sources.phoenix import PhoenixSource

    return PhoenixSource.from_settings(settings)


SOURCE_KINDS["table"] = _table_source
SOURCE_KINDS["litellm"] = _litellm_source
SOURCE_KINDS["phoenix"] = _phoenix_source


def trace_source(settings: Settings) -> TraceSource:
    """The configured source (``JUDGEFLOW_SOURCE``, default ``table``)."""
    from judgeflow.errors import ConfigError

    kind = getattr(settings, "source", None) or "table"
    try:
        factory = SOURCE_KINDS[kind]
    except KeyError:
        raise ConfigError(f"unknown trace source kind {kind!r}; choose from {', '.join(SOURCE_KINDS)}") from None
    return factory(settings)


# SQLSTATE classes of errors that belong to a row's values, not to the query,
# the connection or the server: 22 data exception (casts, division by zero,
# JSON paths), P0 PL/pgSQL raise, 2F/38/39 errors inside a function. Anything
# else (a missing column, a lost connection, a cancelled statement, a
# replica's recovery conflict) is not any one row's fault and is raised.
ROW_ERROR_CLASSES = ("22", "P0", "2F", "38", "39")


def row_error(exc: DBAPIError) -> bool:
    code = getattr(getattr(exc, "orig", None), "sqlstate", None) or ""
    return code[:2] in ROW_ERROR_CLASSES


@dataclass
class ReadBodies:
    """What :func:`read_bodies` found: bodies by id, and the database's error
    for each id whose row could not be read."""

    bodies: dict[str, TraceBody] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    statements: int = 0  # reads made (1 when nothing failed)


def split_on_row_errors(n: int, read: Callable[[int, int], None]) -> dict[int, DBAPIError]:
    """Call ``read(i, j)`` for the parts of ``range(n)``, first the whole; a part whose read fails because
    of some row's values (:func:`row_error`) is split in halves until each failing index is alone
    (about 2·log2(n) reads per bad row). Returns each failing index's error; any other error is raised."""
    failed: dict[int, DBAPIError] = {}
    todo = [(0, n)] if n else []
    while todo:
        i, j = todo.pop()
        try:
            read(i, j)
        except DBAPIError as exc:
            if not row_error(exc):
                raise
            if j - i == 1:
                failed[i] = exc
                continue
            half = (i + j) // 2
            todo.extend([(half, j), (i, half)])
    return failed


def read_bodies(source: TraceSource, engine: Engine, keys: Sequence[TraceKey]) -> ReadBodies:
    """Bodies of ``keys``; a read that fails because of some row's values is split
    (:func:`split_on_row_errors`) until each failing key is alone. Each read is its own
    statement: a failed one aborts nothing else."""
    out = ReadBodies()
    keys = list(dict.fromkeys(keys))

    def read(i: int, j: int) -> None:
        out.statements += 1
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            out.bodies.update(source.bodies(conn, keys[i:j]))

    for i, exc in split_on_row_errors(len(keys), read).items():
        orig = exc.orig
        out.errors[keys[i].id] = f"{type(orig).__name__}: {str(orig).strip()}"
    return out


@dataclass
class SessionPage:
    """One page of :func:`read_session_rows`: the rows with a session value, the last key the page
    covered (where the next page starts; None: the source had nothing more) and the keys whose row
    could not be read, left out."""

    rows: list = field(default_factory=list)
    last: tuple | None = None
    full: bool = False  # the page was as long as asked: there may be more
    unreadable: list[TraceKey] = field(default_factory=list)


def read_session_rows(source: TraceSource, engine: Engine, f: KeyFilter, key: str, limit: int) -> SessionPage:
    """A page of ``source.session_keys`` from ``f``. A page that fails because of some row's values
    (a view's column failing for that row: the same errors :func:`read_bodies` splits on) is read
    again from its keys alone (``keys_sql`` computes no column of the row), split
    (:func:`split_on_row_errors`) until each failing row is alone; that row joins no session (its trace gets its own ``invalid_trace``
    result when it is scored), and the night goes on."""
    try:
        with engine.connect() as conn:
            rows = source.session_keys(conn, f, key, limit)
        last = (rows[-1][1], rows[-1][0]) if rows else None
        return SessionPage(rows=rows, last=last, full=len(rows) == limit)
    except DBAPIError as exc:
        if not row_error(exc):
            raise
    sql, params = source.keys_sql(f)
    with engine.connect() as conn:
        keys = [TraceKey(str(r[0]), r[1]) for r in conn.execute(text(sql), {**params, "limit": limit}).all()]
    page = SessionPage(last=(keys[-1].created_at, keys[-1].id) if keys else None, full=len(keys) == limit)

    def read(i: int, j: int) -> None:
        start = f.after if i == 0 else (keys[i - 1].created_at, keys[i - 1].id)
        end = keys[j - 1]
        # bounded by the part's last time, so a probe reads no further than the part (and its ties)
        part = replace(f, after=start, before=end.created_at + timedelta(microseconds=1))
        with engine.connect() as conn:
            got = source.session_keys(conn, part, key, j - i)
        page.rows.extend(r for r in got if (r[1], r[0]) <= (end.created_at, end.id))

    page.unreadable = [keys[i] for i in sorted(split_on_row_errors(len(keys), read))]
    page.rows.sort(key=lambda r: (r[1], r[0]))
    return page
