"""Source rows judgeflow cannot key or order: a NULL ``id`` (no key for a
result), a NULL ``created_at`` (no place in the oldest-first order) and ids
held by more than one row. Runs skip the first two and score one copy of a
duplicate id (see tasks/claims.py); this module counts them and says how to
list them, for the run summary and `judgeflow db check`.

A run counts only the rows of the window it reads (``created_at >= since``,
through the created_at index); rows with a NULL created_at are in no window,
so only a count over the whole source (the first run, `judgeflow db check
--full`) has them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import Connection, text

if TYPE_CHECKING:
    from judgeflow.sources.table import SourceTable


@dataclass(frozen=True)
class UnusableRows:
    null_id: int = 0
    null_created_at: int | None = 0  # None: not counted (a window has no NULL times)
    duplicate_ids: int = 0  # ids held by more than one row
    duplicate_copies: int = 0  # rows beyond the first of such an id: never scored
    since: datetime | None = None  # counted over created_at >= since; None: the whole source

    @property
    def any(self) -> bool:
        return bool(self.null_id or self.null_created_at or self.duplicate_ids)

    def as_dict(self) -> dict[str, int | None]:
        out = asdict(self)
        del out["since"]
        return out


def listing_sql(source: SourceTable) -> dict[str, str]:
    """The queries that list each kind, for people to run."""
    return {
        "null_id": f"SELECT * FROM {source.sql} WHERE id IS NULL;",
        "null_created_at": f"SELECT * FROM {source.sql} WHERE created_at IS NULL;",
        "duplicate_ids": (
            f"SELECT id, count(*), min(created_at), max(created_at) FROM {source.sql} "
            "WHERE id IS NOT NULL GROUP BY id HAVING count(*) > 1;"
        ),
    }


def describe(source: SourceTable, rows: UnusableRows) -> list[str]:
    """One line per kind present, with what judgeflow does and the SQL to list
    them; ``source`` is a :class:`SourceTable` or any trace source."""
    sql = source.listing_sql() if hasattr(source, "listing_sql") else listing_sql(source)
    lines = []
    where = "" if rows.since is None else f" created at or after {rows.since.isoformat()} (the window this run read)"
    if rows.null_id:
        lines.append(f"{rows.null_id} row(s) of {source.display}{where} with a NULL id are skipped (no key for a result); "
                     f"list them: {sql['null_id']}")
    if rows.null_created_at:
        lines.append(f"{rows.null_created_at} row(s) of {source.display} with a NULL created_at are skipped "
                     f"(no place in the oldest-first order); list them: {sql['null_created_at']}")
    if rows.duplicate_ids:
        lines.append(f"{rows.duplicate_ids} id(s) of {source.display}{where} are held by more than one row: each is "
                     f"scored once, from its copy with the earliest created_at ({rows.duplicate_copies} other "
                     f"copies ignored); list them: {sql['duplicate_ids']}")
    return lines


def count_unusable(
    conn: Connection, source: SourceTable, *, since: datetime | None = None, window: bool = False,
    timeout_s: float = 60.0,
) -> UnusableRows:
    """:func:`count_unusable_rows` over a table or view of judgeflow's own shape."""
    return count_unusable_rows(
        conn, relation_sql=source.sql, id_sql="id", time_sql="created_at", since=since, window=window,
        timeout_s=timeout_s,
    )


def count_unusable_rows(
    conn: Connection, *, relation_sql: str, id_sql: str, time_sql: str, scope_sql: str = "TRUE",
    since: datetime | None = None, since_bound: Any = None, window: bool = False, timeout_s: float = 60.0,
) -> UnusableRows:
    """Counts over the rows of ``relation_sql`` that ``scope_sql`` keeps: with
    ``window``, only rows created at or after ``since`` (None: every row with a
    time) through the time index, NULL times not counted; else over every row
    (one pass, plus a grouping by id). ``since_bound`` is the value compared
    with ``time_sql`` when it differs from ``since`` (a source keeping UTC wall
    times). A statement timeout bounds it on a huge source; the caller decides
    what a timeout means."""
    conn.execute(text("SELECT set_config('statement_timeout', :t, true)"), {"t": f"{int(timeout_s * 1000)}"})
    params: dict = {}
    where = scope_sql
    if window:
        where += f" AND {time_sql} IS NOT NULL"
        if since is not None:
            where += f" AND {time_sql} >= :since"
            params["since"] = since if since_bound is None else since_bound
    null_id, null_created_at = conn.execute(
        text(
            f"SELECT count(*) FILTER (WHERE {id_sql} IS NULL), count(*) FILTER (WHERE {time_sql} IS NULL) "
            f"FROM {relation_sql} WHERE {where}"
        ),
        params,
    ).one()
    duplicate_ids, copies = conn.execute(
        text(
            f"SELECT count(*), COALESCE(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM {relation_sql} "
            f"WHERE {id_sql} IS NOT NULL AND {where} GROUP BY {id_sql}::text HAVING count(*) > 1) d"
        ),
        params,
    ).one()
    return UnusableRows(
        int(null_id), None if window else int(null_created_at), int(duplicate_ids), int(copies),
        since=since if window else None,
    )
