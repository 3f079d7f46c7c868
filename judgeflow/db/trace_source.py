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

Implementations: ``table`` (judgeflow/db/source.py, :class:`~judgeflow.db.source.TableSource`):
``JUDGEFLOW_TRACES_TABLE``, a table or view with judgeflow's columns; the presets
``litellm`` and ``phoenix`` (judgeflow/db/sources/), another tool's tables read in place. Another
kind of source (a preset mapping another tool's tables to judgeflow's trace)
implements the same methods and registers a factory in :data:`SOURCE_KINDS`.

Where the source lives: ``JUDGEFLOW_SOURCE_DATABASE_URL`` (a read replica,
say) or, unset, judgeflow's own database (:func:`source_engine`). Keys and
bodies are read there; which pairs are done, claims and results live in
judgeflow's database, so the two are never joined in one statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, NamedTuple, Protocol, Sequence

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from judgeflow.db.engine import engine_for, get_engine
from judgeflow.settings import Settings


class TraceKey(NamedTuple):
    """A source row's key and time: what claims and the watermark are made of."""

    id: str
    created_at: datetime


@dataclass(frozen=True)
class TraceBody:
    """A trace in judgeflow's shape."""

    id: str
    created_at: datetime
    input: str | None
    output: str | None
    context: Any
    metadata: Any
    # why this trace is not judged (a source preset's verdict on the row: a failed
    # call, a cache hit, a reply with no text); stored as a 'skipped' result with it
    skip: str | None = None


@dataclass(frozen=True)
class KeyFilter:
    """Which keys a read wants; every bound is on ``created_at`` (the index)
    except ``sample_rate``, a deterministic hash of the id."""

    lo: datetime | None = None  # created_at >= lo (the watermark's window)
    since: datetime | None = None  # created_at >= since
    until: datetime | None = None  # created_at < until
    before: datetime | None = None  # created_at < before (a scan's end, e.g. the run's start)
    settle_delay_s: float = 0.0  # created_at < the database's now() - this
    sample_rate: float = 1.0
    after: tuple[datetime, str] | None = None  # keyset: (created_at, id) > after


class UnusableCounts(Protocol):  # judgeflow.db.unusable.UnusableRows
    any: bool


class TraceSource(Protocol):
    """A trace source (see the module docstring)."""

    #: what people call it in messages, e.g. ``public.llm_traces``
    display: str
    #: what the watermark is kept under: changes when the source changes
    identity: str

    def keys_sql(self, f: KeyFilter) -> tuple[str, dict[str, Any]]:
        """One SELECT giving ``id`` (text) and ``created_at`` for the rows that
        match ``f``, ``ORDER BY created_at, id``, ending in ``LIMIT :limit``
        (the caller binds ``limit``). Rows without an id or a time are never
        keys. Served by an index on the time column."""
        ...

    def bodies(self, conn: Connection, keys: Sequence[TraceKey]) -> dict[str, TraceBody]:
        """The traces of ``keys`` by id; an id the source no longer holds is
        absent. Of several rows with one id and time, the same one every call.
        Raises the database's error (DBAPIError) when a row cannot be read."""
        ...

    def unusable(self, conn: Connection, *, lo: datetime | None, full: bool, timeout_s: float) -> Any:
        """Rows no run can use (a :class:`judgeflow.db.unusable.UnusableRows`):
        with ``full``, over the whole source; else only rows with
        ``created_at >= lo`` (the window a run reads; NULL times cannot be in it)."""
        ...

    def listing_sql(self) -> dict[str, str]:
        """SQL people run to list each kind of unusable row."""
        ...

    def check(self, conn: Connection) -> list[tuple[str, str]]:
        """`judgeflow db check` lines about the source: (level, message), level
        one of ok, note, warn, MISSING (MISSING makes the check fail)."""
        ...


# kind -> factory(settings) -> TraceSource; JUDGEFLOW_SOURCE presets add theirs
SOURCE_KINDS: dict[str, Callable[[Settings], TraceSource]] = {}


def _table_source(settings: Settings) -> TraceSource:
    from judgeflow.db.source import TableSource

    return TableSource.from_settings(settings)


def _litellm_source(settings: Settings) -> TraceSource:
    from judgeflow.db.sources.litellm import LiteLLMSource

    return LiteLLMSource.from_settings(settings)


def _phoenix_source(settings: Settings) -> TraceSource:
    from judgeflow.db.sources.phoenix import PhoenixSource

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


def separate_source_database(settings: Settings) -> bool:
    """True when traces are read from another database than judgeflow's own."""
    return getattr(settings, "source_database_url", None) is not None


def source_engine(settings: Settings) -> Engine:
    """Where traces are read: ``JUDGEFLOW_SOURCE_DATABASE_URL`` or judgeflow's database."""
    url = getattr(settings, "source_database_url", None)
    if url is None:
        return engine_for(settings)
    return get_engine(url.get_secret_value(), pool_size=4)


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


def read_bodies(source: TraceSource, engine: Engine, keys: Sequence[TraceKey]) -> ReadBodies:
    """Bodies of ``keys``; a read that fails because of some row's values is
    split in halves until each failing key is alone (about 2·log2(n) reads per
    bad row). Each read is its own statement: a failed one aborts nothing else."""
    out = ReadBodies()
    keys = list(dict.fromkeys(keys))
    todo = [keys] if keys else []
    while todo:
        part = todo.pop()
        out.statements += 1
        try:
            with engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                out.bodies.update(source.bodies(conn, part))
        except DBAPIError as exc:
            if not row_error(exc):
                raise
            if len(part) == 1:
                orig = exc.orig
                out.errors[part[0].id] = f"{type(orig).__name__}: {str(orig).strip()}"
                continue
            half = len(part) // 2
            todo.extend([part[half:], part[:half]])
    return out
