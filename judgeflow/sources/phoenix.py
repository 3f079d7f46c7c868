"""``JUDGEFLOW_SOURCE=phoenix``: Arize Phoenix's spans (self-hosted on PostgreSQL), read in place.

Phoenix stores OpenInference spans in ``spans`` (``attributes`` as nested JSON), under
``traces`` and ``projects``. A trace for judgeflow is one **LLM span**: id its
``span_id``, time its ``start_time``, input the conversation of
``llm.input_messages`` (else ``input.value``), output the reply of
``llm.output_messages`` (else a plain-text ``output.value``), and as context the
``retrieval.documents`` of the RETRIEVER spans of the same Phoenix trace that started
before the LLM span ended, in the order they started (each document's ``content``).
Segments: the Phoenix project (``project``), out of the box.

Keys are read oldest first through a partial index on LLM spans
(:data:`KEY_INDEX_SQL`; `judgeflow db check` gives the statement when it is missing:
Phoenix's own ``ix_spans_start_time`` serves the order but not the span kind), bodies by
the unique ``span_id``; the retrieved documents through ``ix_spans_trace_rowid``.
docs/tables.md has the mapping field by field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import Connection, text

from judgeflow.sources.table import key_filter_sql, session_rows
from judgeflow.sources import catalog
from judgeflow.sources.chat import MalformedChat, conversation, loads, reply_text
from judgeflow.sources.preset_row import Reading, preset_body
from judgeflow.sources.types import KeyFilter, TraceBody, TraceKey
from judgeflow.sources.unusable import UnusableRows, count_unusable_rows

KEY_INDEX = "judgeflow_llm_spans_start_time_span_id_idx"
# what OpenInference writes in place of a hidden input or output (OPENINFERENCE_HIDE_*)
REDACTED = "__REDACTED__"
RECENT_SPANS = 100


def _message(entry: Any) -> dict[str, Any]:
    """An OpenInference message (``{"message": {role, content | contents, tool_calls}}``)
    in OpenAI's shape (``role``, ``content``, ``tool_calls``)."""
    message = entry.get("message", entry) if isinstance(entry, dict) else entry
    if not isinstance(message, dict):
        raise MalformedChat(f"a message is a {type(message).__name__}, not an object")
    content: Any = message.get("content")
    if content is None and isinstance(message.get("contents"), list):
        content = []
        for part in message["contents"]:
            part = part.get("message_content", part) if isinstance(part, dict) else part
            if isinstance(part, dict) and part.get("type") == "image":
                content.append({"type": "image_url"})
            elif isinstance(part, dict):
                content.append({"type": "text", "text": part.get("text")})
            else:
                raise MalformedChat("a message content part is not an object")
    calls = []
    for call in message.get("tool_calls") or []:
        call = call.get("tool_call", call) if isinstance(call, dict) else call
        calls.append(call)
    return {"role": message.get("role") or "user", "content": content, "tool_calls": calls or None}


def _value(attributes: dict, name: str) -> tuple[Any, str | None]:
    block = attributes.get(name)
    if not isinstance(block, dict):
        return None, None
    return block.get("value"), block.get("mime_type")


def _input_from_value(value: Any, mime: str | None) -> str | None:
    """``input.value``: an OpenAI request (JSON with messages) or plain text."""
    if value is None:
        return None
    if isinstance(value, str) and (mime or "").endswith("json"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        if isinstance(parsed, dict) and isinstance(parsed.get("messages"), list):
            return conversation([_message(m) for m in parsed["messages"]])
        return value
    return value if isinstance(value, str) else json.dumps(value)


def _output_from_value(value: Any, mime: str | None) -> tuple[str | None, str | None]:
    """``output.value``: an OpenAI chat completion (JSON) or plain text."""
    if value is None or value == "":
        return None, "the LLM span has no output: no text to judge"
    if isinstance(value, str) and (mime or "").endswith("json"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value, None
        choices = parsed.get("choices") if isinstance(parsed, dict) else None
        if isinstance(choices, list) and choices and isinstance(choices[0], dict) and "message" in choices[0]:
            return reply_text(choices[0]["message"])
        return value, None
    return (value, None) if isinstance(value, str) else (json.dumps(value), None)


def _documents(retrievals: Any) -> list[str] | None:
    """The content of each retrieved document, retriever by retriever, in order."""
    out: list[str] = []
    for documents in loads(retrievals) or []:
        for entry in documents if isinstance(documents, list) else []:
            document = entry.get("document", entry) if isinstance(entry, dict) else None
            content = document.get("content") if isinstance(document, dict) else None
            if isinstance(content, str) and content.strip():
                out.append(content)
    return out or None


def read_span(attributes: Any, status_code: str | None, status_message: str | None
              ) -> tuple[str | None, str | None, str | None]:
    """``(input, output, skip)`` of one LLM span's attributes: a failed call and a
    reply without text are skipped with the reason; :class:`MalformedChat` for an
    unexpected shape."""
    if status_code == "ERROR":
        detail = f" ({status_message[:200]})" if status_message else ""
        return None, None, f"the LLM call failed (span status ERROR{detail}): there is no reply to judge"
    attributes = loads(attributes)
    if not isinstance(attributes, dict):
        raise MalformedChat(f"the span's attributes are a {type(attributes).__name__}, not an object")
    llm = attributes.get("llm") if isinstance(attributes.get("llm"), dict) else {}
    inputs = llm.get("input_messages")
    if isinstance(inputs, list) and inputs:
        judged_input = conversation([_message(m) for m in inputs])
    else:
        judged_input = _input_from_value(*_value(attributes, "input"))
    outputs = llm.get("output_messages")
    if isinstance(outputs, list) and outputs:
        output, skip = reply_text(_message(outputs[-1]))
    else:
        output, skip = _output_from_value(*_value(attributes, "output"))
    if output is not None and output.strip() == REDACTED:
        return judged_input, None, "the app hides LLM outputs from Phoenix (OPENINFERENCE_HIDE_OUTPUTS): no text to judge"
    if judged_input == REDACTED:
        judged_input = None
    return judged_input, output, skip


def trace_of(row: dict[str, Any]) -> TraceBody:
    """An LLM span as judgeflow's trace; never raises on the span's content."""
    metadata = {
        "project": row.get("project"), "trace_id": row.get("trace_id"), "span_name": row.get("name"),
        "model": row.get("model"), "status": row.get("status_code"),
    }

    def read() -> Reading:
        judged_input, output, skip = read_span(row.get("attributes"), row.get("status_code"), row.get("status_message"))
        return Reading(judged_input, output, skip, _documents(row.get("retrievals")))

    return preset_body(row["span_id"], row["created_at"], metadata, read, malformed="malformed Phoenix span")


@dataclass(frozen=True)
class PhoenixSource:
    """The ``phoenix`` trace source (see the module doc)."""

    schema: str | None = None

    @classmethod
    def from_settings(cls, settings) -> "PhoenixSource":
        return cls(settings.source_schema)

    def rel(self, name: str) -> str:
        return catalog.qualified(self.schema, name)

    @property
    def display(self) -> str:
        return f"{self.schema}.spans" if self.schema else "spans"

    @property
    def identity(self) -> str:
        return f"phoenix:{self.display}"

    @property
    def key_index_sql(self) -> str:
        return (
            f'CREATE INDEX CONCURRENTLY "{KEY_INDEX}" ON {self.rel("spans")} (start_time, span_id) '
            "WHERE span_kind = 'LLM';"
        )

    def keys_sql(self, f: KeyFilter) -> tuple[str, dict[str, Any]]:
        clauses, params = key_filter_sql(f, column="t.start_time", id_sql="t.span_id::text")
        return (
            f"SELECT t.span_id::text AS id, t.start_time AS created_at FROM {self.rel('spans')} t "
            f"WHERE t.span_kind = 'LLM' AND {' AND '.join(clauses)} ORDER BY t.start_time, t.span_id::text "
            "LIMIT :limit",
            params,
        )

    def session_keys(self, conn: Connection, f: KeyFilter, key: str, limit: int) -> list:
        """OpenInference's ``session.id`` span attribute (``JUDGEFLOW_SESSION_KEY`` is the table source's)."""
        return session_rows(conn, f"FROM {self.rel('spans')} t WHERE t.span_kind = 'LLM'", "t.start_time",
                            "t.span_id::text", "t.attributes #>> '{session,id}'", f, limit, {})

    def bodies(self, conn: Connection, keys: Sequence[TraceKey]) -> dict[str, TraceBody]:
        if not keys:
            return {}
        rows = conn.execute(
            text(
                f"""
                SELECT s.span_id::text AS span_id, s.start_time AS created_at, s.name, s.attributes,
                    s.status_code, s.status_message, s.attributes #>> '{{llm,model_name}}' AS model,
                    tr.trace_id, p.name AS project,
                    (SELECT jsonb_agg(r.attributes #> '{{retrieval,documents}}' ORDER BY r.start_time, r.id)
                     FROM {self.rel('spans')} r
                     WHERE r.trace_rowid = s.trace_rowid AND r.span_kind = 'RETRIEVER'
                       AND r.start_time <= s.end_time) AS retrievals
                FROM {self.rel('spans')} s
                JOIN {self.rel('traces')} tr ON tr.id = s.trace_rowid
                JOIN {self.rel('projects')} p ON p.id = tr.project_rowid
                WHERE s.span_id = ANY(CAST(:ids AS text[])) AND s.span_kind = 'LLM'
                """
            ),
            {"ids": [k.id for k in keys]},
        ).mappings().all()
        return {r["span_id"]: trace_of(dict(r)) for r in rows}

    def has_id(self, conn: Connection, trace_id: str) -> bool:
        return bool(conn.execute(
            text(f"SELECT EXISTS (SELECT 1 FROM {self.rel('spans')} t WHERE t.span_id = :id AND t.span_kind = 'LLM')"),
            {"id": trace_id},
        ).scalar())

    def llm_spans_of(self, conn: Connection, some_id: str) -> tuple[str, list[str]] | None:
        """The Phoenix trace ``some_id`` names (its trace id, or the id of any of its spans)
        and the ids of its LLM spans, oldest first; None when it names none."""
        trace = conn.execute(text(
            f"""
            SELECT tr.id, tr.trace_id FROM {self.rel('traces')} tr WHERE tr.trace_id = :id
            UNION ALL
            SELECT tr.id, tr.trace_id FROM {self.rel('spans')} s JOIN {self.rel('traces')} tr ON tr.id = s.trace_rowid
            WHERE s.span_id = :id
            LIMIT 1
            """
        ), {"id": some_id}).first()
        if trace is None:
            return None
        spans = conn.execute(text(
            f"SELECT span_id::text FROM {self.rel('spans')} WHERE trace_rowid = :t AND span_kind = 'LLM' "
            "ORDER BY start_time, span_id"
        ), {"t": trace.id}).scalars().all()
        return str(trace.trace_id), list(spans)

    def span_home(self, conn: Connection, span_id: str) -> tuple[str, str] | None:
        """(the Phoenix trace id, the project's name) of the span ``span_id``; None when
        Phoenix no longer holds it."""
        row = conn.execute(text(
            f"SELECT tr.trace_id, p.name FROM {self.rel('spans')} s JOIN {self.rel('traces')} tr "
            f"ON tr.id = s.trace_rowid JOIN {self.rel('projects')} p ON p.id = tr.project_rowid WHERE s.span_id = :id"
        ), {"id": span_id}).first()
        return None if row is None else (str(row[0]), str(row[1]))

    def unusable(self, conn: Connection, *, lo: datetime | None, full: bool, timeout_s: float = 60.0) -> UnusableRows:
        """span_id and start_time are NOT NULL in Phoenix's schema and span_id is unique;
        counted anyway, over the LLM spans of the window (or of everything)."""
        return count_unusable_rows(
            conn, relation_sql=f"{self.rel('spans')} t", id_sql="t.span_id", time_sql="t.start_time",
            scope_sql="t.span_kind = 'LLM'", since=None if full else lo, window=not full, timeout_s=timeout_s,
        )

    def listing_sql(self) -> dict[str, str]:
        spans = self.rel("spans")
        return {
            "null_id": f"SELECT * FROM {spans} WHERE span_kind = 'LLM' AND span_id IS NULL;",
            "null_created_at": f"SELECT * FROM {spans} WHERE span_kind = 'LLM' AND start_time IS NULL;",
            "duplicate_ids": (
                f"SELECT span_id, count(*) FROM {spans} WHERE span_kind = 'LLM' GROUP BY span_id HAVING count(*) > 1;"
            ),
        }

    def check(self, conn: Connection) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        needed = {
            "spans": ("span_id", "trace_rowid", "span_kind", "start_time", "end_time", "attributes", "status_code"),
            "traces": ("id", "trace_id", "project_rowid"),
            "projects": ("id", "name"),
        }
        for table, cols in needed.items():
            found = catalog.columns(conn, self.rel(table))
            if not found:
                return [(
                    "MISSING",
                    f"Phoenix's table {self.rel(table)} does not exist (JUDGEFLOW_SOURCE=phoenix): point "
                    "JUDGEFLOW_SOURCE_DATABASE_URL (or JUDGEFLOW_DATABASE_URL) at Phoenix's database "
                    "(PHOENIX_SQL_DATABASE_URL), and JUDGEFLOW_SOURCE_SCHEMA at PHOENIX_SQL_DATABASE_SCHEMA if set",
                )]
            missing = [c for c in cols if c not in found]
            if missing:
                out.append(("MISSING", f"Phoenix's {self.rel(table)} lacks column(s) {', '.join(missing)}: "
                                       "a Phoenix version judgeflow does not know"))
        if out:
            return out
        out.append(("ok", f"Phoenix's tables found ({self.display}, traces, projects)"))
        out.append(self._index_line(conn))
        out.append(self._outputs_line(conn))
        return out

    def _index_line(self, conn: Connection) -> tuple[str, str]:
        found = [i for i in catalog.indexes(conn, self.rel("spans")) if i.valid]
        for index in found:
            if index.leads_with("start_time", "span_id") and index.predicate and "'LLM'" in index.predicate:
                return ("ok", f"index {index.name} on LLM spans (start_time, span_id): keys are read from it alone")
        if any(i.leads_with("start_time") and i.predicate is None for i in found):
            # a choice, not a fault: the index needs rights on Phoenix's database, which judgeflow only reads
            return (
                "note",
                f"no index on the LLM spans of {self.display}: runs read keys through Phoenix's own start_time "
                "index, visiting every span of the window, not only the LLM spans (see docs/tables.md for the "
                "cost); fine to run so. Optional, with CREATE rights on Phoenix's database (judgeflow never "
                f"creates it), for index-only reads: {self.key_index_sql}",
            )
        return ("MISSING", f"index on the LLM spans of {self.display}: {self.key_index_sql}")

    def _outputs_line(self, conn: Connection) -> tuple[str, str]:
        rows = conn.execute(
            text(
                "SELECT (t.attributes #> '{llm,output_messages}') IS NOT NULL "
                "OR COALESCE(t.attributes #>> '{output,value}', '') NOT IN ('', :redacted) "
                f"FROM {self.rel('spans')} t WHERE t.span_kind = 'LLM' AND t.status_code <> 'ERROR' "
                "ORDER BY t.start_time DESC LIMIT :n"
            ),
            {"n": RECENT_SPANS, "redacted": REDACTED},
        ).scalars().all()
        if not rows:
            return ("note", f"{self.display} holds no successful LLM span yet")
        with_output = sum(1 for r in rows if r)
        if not with_output:
            return ("MISSING", f"none of the last {len(rows)} LLM spans carries its output: the app hides outputs "
                               "from Phoenix (unset OPENINFERENCE_HIDE_OUTPUTS / OPENINFERENCE_HIDE_OUTPUT_MESSAGES)")
        return ("ok", f"{with_output} of the last {len(rows)} LLM spans carry their output")
