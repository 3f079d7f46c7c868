"""The table (or view) judgeflow reads traces from. judgeflow only ever reads it.

Its name comes from configuration, so it is validated as a plain identifier
(``name`` or ``schema.name``) and quoted; anything else is refused before it
can reach SQL. :class:`TableSource` is the ``table`` kind of
:class:`judgeflow.sources.trace_source.TraceSource`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import Connection, text

from judgeflow.errors import ConfigError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

REQUIRED_COLUMNS = ("id", "created_at", "output")
OPTIONAL_COLUMNS = ("input", "context", "metadata")


@dataclass(frozen=True)
class SourceTable:
    schema: str | None
    name: str

    @classmethod
    def parse(cls, qualified: str) -> "SourceTable":
        parts = (qualified or "").split(".")
        if len(parts) > 2 or not all(_IDENT.match(p) for p in parts):
            raise ConfigError(
                f"JUDGEFLOW_TRACES_TABLE must be 'name' or 'schema.name' made of letters, digits "
                f"and underscores; refusing {qualified!r}"
            )
        return cls(parts[0], parts[1]) if len(parts) == 2 else cls(None, parts[0])

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name

    @property
    def sql(self) -> str:
        """The quoted identifier; safe because parse() admits only [A-Za-z0-9_]."""
        return f'"{self.schema}"."{self.name}"' if self.schema else f'"{self.name}"'

    def columns(self, conn: Connection) -> dict[str, str]:
        """Column name -> data type; empty when the relation does not exist."""
        rows = conn.execute(
            text(
                """
                SELECT a.attname, format_type(a.atttypid, a.atttypmod)
                FROM pg_attribute a
                WHERE a.attrelid = to_regclass(:rel) AND a.attnum > 0 AND NOT a.attisdropped
                """
            ),
            {"rel": self.sql},
        ).all()
        return {name: dtype for name, dtype in rows}

    def select_list(self, available: dict[str, str]) -> str:
        """Columns in judgeflow's shape; optional columns a source lacks read as NULL."""
        missing = [c for c in REQUIRED_COLUMNS if c not in available]
        if not available:
            raise ConfigError(f"trace source {self.display!r} does not exist (JUDGEFLOW_TRACES_TABLE)")
        if missing:
            raise ConfigError(
                f"trace source {self.display!r} lacks required column(s) {', '.join(missing)}; "
                "create a view that exposes id, created_at, input, output, context, metadata"
            )
        parts = ["t.id::text AS trace_id", "t.created_at AS created_at", "t.output::text AS output"]
        parts.append("t.input::text AS input" if "input" in available else "NULL::text AS input")
        parts.append("to_jsonb(t.context) AS context" if "context" in available else "NULL::jsonb AS context")
        parts.append("to_jsonb(t.metadata) AS metadata" if "metadata" in available else "NULL::jsonb AS metadata")
        return ", ".join(parts)

    def created_at_indexed(self, conn: Connection) -> bool | None:
        """True/False for a table; None for a view (its base table must be checked)."""
        kind = conn.execute(
            text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:rel)"), {"rel": self.sql}
        ).scalar()
        if kind not in ("r", "p"):
            return None
        return bool(
            conn.execute(
                text(
                    """
                    SELECT 1 FROM pg_index i
                    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                    WHERE i.indrelid = to_regclass(:rel) AND a.attname = 'created_at'
                    """
                ),
                {"rel": self.sql},
            ).first()
        )


# Of several source rows with one id, the run scores the one with the earliest
# created_at (keys are taken oldest first, and a later copy finds the pair
# claimed or done); copies created at the same instant are ordered by the md5
# of their output, so every read picks the same one.
DUPLICATE_TIE_BREAK = "md5(COALESCE(t.output::text, ''))"

# deterministic per trace id: the same traces are in the sample every run
SAMPLE_SQL = "(('x' || substr(md5({id}), 1, 8))::bit(32)::bigint / 4294967296.0) < :rate"


def session_rows(conn: Connection, relation: str, column: str, id_sql: str, value_sql: str, f, limit: int,
                 params: dict[str, Any]) -> list:
    """(id, created_at, session value) of a source's rows matching ``f`` with a non-empty value, in key order
    (every source kind's ``session_keys``: ``relation`` is its FROM clause, with its own conditions)."""
    clauses, key_params = key_filter_sql(f, column=column, id_sql=id_sql)
    where = " AND ".join([*clauses, f"({value_sql}) <> ''"])
    joiner = " AND " if " WHERE " in relation else " WHERE "
    sql = (f"SELECT {id_sql} AS id, {column} AS created_at, {value_sql} AS session {relation}{joiner}{where} "
           f"ORDER BY {column}, {id_sql} LIMIT :limit")
    return [tuple(r) for r in conn.execute(text(sql), {**key_params, **params, "limit": limit}).all()]


def key_filter_sql(f, *, column: str = "t.created_at", id_sql: str = "t.id::text") -> tuple[list[str], dict[str, Any]]:
    """The WHERE clauses of a :class:`~judgeflow.sources.trace_source.KeyFilter`
    over a time column and an id expression (shared by every source kind)."""
    clauses = [f"{id_sql} IS NOT NULL", f"{column} IS NOT NULL"]
    params: dict[str, Any] = {}
    if f.lo is not None:
        clauses.append(f"{column} >= :k_lo")
        params["k_lo"] = f.lo
    if f.since is not None:
        clauses.append(f"{column} >= :k_since")
        params["k_since"] = f.since
    if f.until is not None:
        clauses.append(f"{column} < :k_until")
        params["k_until"] = f.until
    if f.before is not None:
        clauses.append(f"{column} < :k_before")
        params["k_before"] = f.before
    if f.settle_delay_s > 0:
        # a trace younger than the delay may still be being written; the
        # database's clock decides, so the scoring machine's cannot skew it
        clauses.append(f"{column} < now() - make_interval(secs => :k_settle)")
        params["k_settle"] = float(f.settle_delay_s)
    if f.sample_rate < 1.0:
        clauses.append(SAMPLE_SQL.format(id=id_sql))
        params["rate"] = f.sample_rate
    if f.after is not None:
        # the plain bound lets the index start at the cursor; the row
        # comparison alone cannot bound the scan
        clauses.append(f"{column} >= :k_at")
        clauses.append(f"({column}, {id_sql}) > (:k_at, :k_id)")
        params.update(k_at=f.after[0], k_id=f.after[1])
    return clauses, params


@dataclass(frozen=True)
class TableSource:
    """The ``table`` source: ``JUDGEFLOW_TRACES_TABLE`` (a table or a view)
    with the columns id, created_at, output and optionally input, context,
    metadata. See :mod:`judgeflow.sources.trace_source`."""

    table: SourceTable

    @classmethod
    def from_settings(cls, settings) -> "TableSource":
        return cls(SourceTable.parse(settings.traces_table))

    @property
    def display(self) -> str:
        return self.table.display

    @property
    def identity(self) -> str:
        return f"table:{self.table.display}"

    def keys_sql(self, f) -> tuple[str, dict[str, Any]]:
        clauses, params = key_filter_sql(f)
        return (
            f"SELECT t.id::text AS id, t.created_at AS created_at FROM {self.table.sql} t "
            f"WHERE {' AND '.join(clauses)} ORDER BY t.created_at, t.id::text LIMIT :limit",
            params,
        )

    def session_keys(self, conn: Connection, f, key: str, limit: int) -> list:
        if "metadata" not in self.table.columns(conn):
            return []
        return session_rows(conn, f"FROM {self.table.sql} t", "t.created_at", "t.id::text",
                            "to_jsonb(t.metadata) ->> :s_key", f, limit, {"s_key": key})

    def bodies(self, conn: Connection, keys: Sequence) -> dict[str, Any]:
        from judgeflow.sources.types import TraceBody

        if not keys:
            return {}
        select_list = self.table.select_list(self.table.columns(conn))
        rows = conn.execute(
            text(
                f"SELECT DISTINCT ON (t.id::text) {select_list} FROM {self.table.sql} t "
                # the time first: the created_at index finds the rows, the ids filter them
                "WHERE t.created_at = ANY(:ats) AND t.id::text = ANY(CAST(:ids AS text[])) "
                f"ORDER BY t.id::text, t.created_at, {DUPLICATE_TIE_BREAK}"
            ),
            {"ats": sorted({k.created_at for k in keys}), "ids": [k.id for k in keys]},
        ).mappings().all()
        wanted = {k.id: k.created_at for k in keys}
        return {
            r["trace_id"]: TraceBody(
                id=r["trace_id"], created_at=r["created_at"], input=r["input"], output=r["output"],
                context=r["context"], metadata=r["metadata"],
            )
            for r in rows
            if r["trace_id"] in wanted
        }

    def unusable(self, conn: Connection, *, lo: datetime | None, full: bool, timeout_s: float = 60.0):
        from judgeflow.sources.unusable import count_unusable

        return count_unusable(conn, self.table, since=None if full else lo, window=not full, timeout_s=timeout_s)

    def listing_sql(self) -> dict[str, str]:
        from judgeflow.sources.unusable import listing_sql

        return listing_sql(self.table)

    def check(self, conn: Connection) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        source = self.table
        columns = source.columns(conn)
        if not columns:
            return [("MISSING", f"trace source {source.display} does not exist")]
        out.append(("ok", f"trace source {source.display} found"))
        for name in REQUIRED_COLUMNS:
            if name not in columns:
                out.append(("MISSING", f"required column {source.display}.{name}"))
        for name in OPTIONAL_COLUMNS:
            if name not in columns:
                out.append(("note", f"optional column {source.display}.{name} absent; read as NULL"))
        indexed = source.created_at_indexed(conn)
        if indexed is None:
            out.append(("note", f"{source.display} is a view: make sure its base table has an index on created_at"))
        elif indexed:
            out.append(("ok", f"index on {source.display}(created_at)"))
        else:
            out.append(("MISSING", f"index on {source.display}(created_at): CREATE INDEX ON {source.sql} (created_at);"))
        return out


CREATE_DEFAULT_TABLE = """
CREATE TABLE IF NOT EXISTS llm_traces (
    id          text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    input       text,
    output      text,
    context     jsonb,
    metadata    jsonb
);
CREATE INDEX IF NOT EXISTS llm_traces_created_at_idx ON llm_traces (created_at);
"""
