"""Which segment keys the results carry, and filling a key into past results.

A result stores the values of the segment keys configured when it was scored
(``eval_results.segment``); a key configured later is on the results written
since. :func:`keys_carried` says which keys the configured source's results
carry and from which trace hour on, read from the result rollup (its triggers
keep a row per key and hour), not from the results. :func:`fill_page` and
:func:`fill_values` are the SQL of ``judgeflow db fill-segments``: a page of the
traces whose results lack the key, walked by trace id, and one update per page."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import Connection, text

_CARRIED = text(
    "SELECT seg_key, min(trace_hour) FROM judgeflow.result_rollup "
    "WHERE n > 0 AND (source = :source OR source IS NULL) GROUP BY seg_key ORDER BY seg_key"
)
# the primary key (trace_id, metric) walks the traces in order; a page is the traces, all their metrics
_PAGE = text(
    "SELECT trace_id, min(trace_created_at) FROM judgeflow.eval_results "
    "WHERE trace_id > :after AND source = :source AND NOT segment ? :key "
    "GROUP BY trace_id ORDER BY trace_id LIMIT :page"
)
_FILL = text(
    "UPDATE judgeflow.eval_results r SET segment = r.segment || e.value "
    "FROM jsonb_each(CAST(:values AS jsonb)) AS e(trace_id, value) "
    "WHERE r.trace_id = e.trace_id AND r.source = :source"
)


def keys_carried(conn: Connection, source: str) -> dict[str, datetime]:
    """Each segment key the source's results carry -> the first trace hour a result carries it;
    under '' the first trace hour of any result."""
    return dict(conn.execute(_CARRIED, {"source": source}).all())


def fill_page(conn: Connection, source: str, key: str, *, after: str, page: int) -> list[tuple[str, datetime]]:
    """The next ``page`` traces after ``after`` (by id) with a result of ``source`` lacking ``key``."""
    return [tuple(r) for r in conn.execute(_PAGE, {"source": source, "key": key, "after": after, "page": page})]


def fill_values(conn: Connection, source: str, values: dict[str, dict[str, str]]) -> int:
    """Add each trace's ``{key: value}`` to the segment of every result of it; the rows updated."""
    if not values:
        return 0
    return conn.execute(_FILL, {"source": source, "values": json.dumps(values)}).rowcount
