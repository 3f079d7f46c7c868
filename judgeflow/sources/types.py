"""The shapes every trace source shares: :class:`TraceKey`, :class:`TraceBody`,
:class:`KeyFilter` and the :class:`TraceSource` interface
(judgeflow/sources/trace_source.py says how they are used). Apart from the
registry of source kinds, so a source's own module can import them without
importing every other source (no import cycle)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol, Sequence

from sqlalchemy import Connection


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


class UnusableCounts(Protocol):  # judgeflow.sources.unusable.UnusableRows
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

    def session_keys(self, conn: Connection, f: KeyFilter, key: str, limit: int) -> list[tuple[str, datetime, str]]:
        """Conversations (docs/metrics.md): ``(id, created_at, session value)`` of the rows that match
        ``f`` and carry a non-empty session value (the table's ``metadata ->> key``; a preset's own
        field), ``ORDER BY created_at, id``, at most ``limit``; served by the time column's index.
        A source that cannot hold one (a table without metadata) gives none."""
        ...

    def unusable(self, conn: Connection, *, lo: datetime | None, full: bool, timeout_s: float) -> Any:
        """Rows no run can use (a :class:`judgeflow.sources.unusable.UnusableRows`):
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
