"""What a preset's ``db check`` asks PostgreSQL's catalog: a relation's columns and indexes."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text


def qualified(schema: str | None, name: str) -> str:
    """A quoted relation name; the schema and name are validated identifiers."""
    return f'"{schema}"."{name}"' if schema else f'"{name}"'


def columns(conn: Connection, relation_sql: str) -> set[str]:
    """The relation's column names; empty when it does not exist."""
    rows = conn.execute(
        text(
            "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = to_regclass(:rel) "
            "AND a.attnum > 0 AND NOT a.attisdropped"
        ),
        {"rel": relation_sql},
    ).scalars()
    return set(rows)


@dataclass(frozen=True)
class IndexInfo:
    name: str
    columns: tuple[str | None, ...]  # None for an expression
    predicate: str | None  # a partial index's WHERE, as PostgreSQL prints it
    valid: bool

    def leads_with(self, *names: str) -> bool:
        return self.columns[: len(names)] == names


def indexes(conn: Connection, relation_sql: str) -> list[IndexInfo]:
    """The btree indexes of a table (a partitioned parent's included)."""
    rows = conn.execute(
        text(
            """
            SELECT i.relname, array_agg(a.attname ORDER BY k.ord), pg_get_expr(x.indpred, x.indrelid), x.indisvalid
            FROM pg_index x
            JOIN pg_class i ON i.oid = x.indexrelid
            JOIN pg_am am ON am.oid = i.relam AND am.amname = 'btree'
            CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
            LEFT JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum AND k.attnum > 0
            WHERE x.indrelid = to_regclass(:rel) AND k.ord <= x.indnkeyatts
            GROUP BY i.relname, x.indpred, x.indrelid, x.indisvalid
            """
        ),
        {"rel": relation_sql},
    ).all()
    return [IndexInfo(name, tuple(cols), pred, bool(valid)) for name, cols, pred, valid in rows]
