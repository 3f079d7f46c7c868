"""The table (or view) judgeflow reads traces from. judgeflow only ever reads it.

Its name comes from configuration, so it is validated as a plain identifier
(``name`` or ``schema.name``) and quoted; anything else is refused before it
can reach SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
