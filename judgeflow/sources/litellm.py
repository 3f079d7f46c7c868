"""``JUDGEFLOW_SOURCE=litellm``: the LiteLLM proxy's spend logs, read in place.

The proxy writes one row per call to ``"LiteLLM_SpendLogs"`` (its own migrations,
package ``litellm-proxy-extras``): the request body in ``proxy_server_request`` and the
reply in ``response`` (both only with ``store_prompts_in_spend_logs``), the time in
``"startTime"`` (``timestamp(3)``, UTC wall time: prisma writes UTC), segments in
``model``, ``model_group``, ``team_id``, ``end_user`` and ``request_tags``.

A trace is one row: id ``request_id``, time ``"startTime"`` read as UTC, input the
conversation up to the reply, output the reply's text, no context (the proxy sees no
retrieved documents). Keys are read oldest first through the proxy's own
``"startTime"`` indexes (``"LiteLLM_SpendLogs_startTime_request_id_idx"``, or the planner's
choice of ``"LiteLLM_SpendLogs_startTime_idx"`` plus an incremental sort: docs/benchmark.md),
bodies by the primary key. A row that has nothing to judge is a
``skipped`` result with the reason (:func:`read_row`); docs/tables.md has the mapping
field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Sequence

from sqlalchemy import Connection, text

from judgeflow.sources.table import key_filter_sql
from judgeflow.sources import catalog
from judgeflow.sources.chat import MalformedChat, conversation, loads, part_text, reply_text
from judgeflow.sources.preset_row import Reading, preset_body
from judgeflow.sources.types import KeyFilter, TraceBody, TraceKey
from judgeflow.sources.unusable import UnusableRows, count_unusable_rows

TABLE = "LiteLLM_SpendLogs"
KEY_INDEX_COLUMNS = ("startTime", "request_id")
# the proxy's call types whose request and reply are chat (or text) completions
CHAT_CALL_TYPES = frozenset({"completion", "acompletion", "text_completion", "atext_completion"})
REQUIRED_COLUMNS = (
    "request_id", "startTime", "call_type", "status", "cache_hit", "proxy_server_request", "response",
    "model", "model_group", "team_id", "end_user", "request_tags", "metadata",
)
# what the proxy writes in place of content under turn_off_message_logging
REDACTED = "REDACTED_BY_LITELM"
RECENT_CALLS = 100  # how many of the latest calls `db check` looks at for stored prompts


def utc_wall(value: Any) -> Any:
    """A timezone-aware datetime as the naive UTC wall time a ``timestamp`` column holds."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def utc_wall_filter(f: KeyFilter, *, column: str, id_sql: str) -> tuple[list[str], dict[str, Any]]:
    """:func:`key_filter_sql` over a ``timestamp`` (without time zone) column holding UTC:
    its bounds are bound as UTC wall times, and "now" is the database's now in UTC, so the
    session's TimeZone never shifts them and the column's index serves every bound."""
    clauses, params = key_filter_sql(replace(f, settle_delay_s=0.0), column=column, id_sql=id_sql)
    params = {k: utc_wall(v) for k, v in params.items()}
    if f.settle_delay_s > 0:
        clauses.append(f"{column} < (now() AT TIME ZONE 'UTC') - make_interval(secs => :k_settle)")
        params["k_settle"] = float(f.settle_delay_s)
    return clauses, params


def _tags(value: Any) -> str | None:
    """Request tags as one segment value: sorted, comma-joined ('chat,prod')."""
    try:
        tags = loads(value)
    except MalformedChat:
        return None
    if not isinstance(tags, list):
        return None
    names = sorted({str(t) for t in tags if isinstance(t, (str, int, float)) and str(t).strip()})
    return ",".join(names) or None


def _failure_reason(error: Any) -> str:
    try:
        error = loads(error)
    except MalformedChat:
        error = None
    detail = ""
    if isinstance(error, dict):
        kind = error.get("error_class") or error.get("error_code") or ""
        message = str(error.get("error_message") or "")[:200]
        detail = f" ({': '.join(str(p) for p in (kind, message) if p)})" if kind or message else ""
    return f"the call failed at the proxy{detail}: there is no reply to judge"


def read_row(row: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """``(input, output, skip)`` of one spend-log row, in this order of checks:
    a failed call, a cache hit, a call that is not a chat or text completion, no
    stored request body, no stored reply, a reply without text: skipped, each with
    its reason. Raises :class:`MalformedChat` for a body of an unexpected shape."""
    if (row.get("status") or "success") == "failure":
        return None, None, _failure_reason(row.get("error_information"))
    request_id = str(row.get("request_id") or "")
    if str(row.get("cache_hit") or "").lower() == "true" or "_cache_hit" in request_id:
        original = request_id.split("_cache_hit", 1)[0]
        return None, None, f"a cache hit: the proxy served the reply of request {original} again; judged there, once"
    call_type = str(row.get("call_type") or "")
    if call_type not in CHAT_CALL_TYPES:
        return None, None, f"call type {call_type!r} is not a chat or text completion"
    request = loads(row.get("proxy_server_request"))
    if not request:
        return None, None, (
            "LiteLLM stored no request body for this call: set store_prompts_in_spend_logs: true in the "
            "proxy's general_settings"
        )
    if not isinstance(request, dict):
        raise MalformedChat(f"proxy_server_request is a {type(request).__name__}, not an object")
    if "messages" in request:
        judged_input = conversation(request["messages"])
    elif "prompt" in request:
        prompt = request["prompt"]
        judged_input = "\n".join(map(str, prompt)) if isinstance(prompt, list) else part_text(prompt)
    else:
        raise MalformedChat("the request body has neither messages nor prompt")
    response = loads(row.get("response"))
    if not response:
        return judged_input, None, "LiteLLM stored no reply for this call (response is empty)"
    if not isinstance(response, dict):
        raise MalformedChat(f"response is a {type(response).__name__}, not an object")
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedChat("the response has no choices")
    first = choices[0]
    if "message" in first:
        output, skip = reply_text(first["message"])
    else:
        output = part_text(first.get("text"))
        skip = None if output.strip() else "the reply is empty: no text to judge"
        output = output if skip is None else None
    if output is not None and output.strip() == REDACTED:
        return judged_input, None, "LiteLLM redacted the messages (turn_off_message_logging): no text to judge"
    return judged_input, output, skip


def trace_of(row: dict[str, Any]) -> TraceBody:
    """A spend-log row as judgeflow's trace; never raises on the row's content."""
    metadata = {
        "model": row.get("model") or None, "model_group": row.get("model_group") or None,
        "team_id": row.get("team_id") or None, "end_user": row.get("end_user") or None,
        "tags": _tags(row.get("request_tags")), "user": row.get("user") or None,
        "call_type": row.get("call_type"), "status": row.get("status"), "session_id": row.get("session_id"),
    }
    return preset_body(row["request_id"], row["created_at"], metadata, lambda: Reading(*read_row(row)),
                       malformed="malformed LiteLLM spend-log row")


@dataclass(frozen=True)
class LiteLLMSource:
    """The ``litellm`` trace source (see the module doc)."""

    schema: str | None = None

    @classmethod
    def from_settings(cls, settings) -> "LiteLLMSource":
        return cls(settings.source_schema)

    @property
    def table_sql(self) -> str:
        return catalog.qualified(self.schema, TABLE)

    @property
    def display(self) -> str:
        return f"{self.schema}.{TABLE}" if self.schema else TABLE

    @property
    def identity(self) -> str:
        return f"litellm:{self.display}"

    def keys_sql(self, f: KeyFilter) -> tuple[str, dict[str, Any]]:
        clauses, params = utc_wall_filter(f, column='t."startTime"', id_sql="t.request_id")
        return (
            f"""SELECT t.request_id AS id, (t."startTime" AT TIME ZONE 'UTC') AS created_at FROM {self.table_sql} t """
            f"""WHERE {' AND '.join(clauses)} ORDER BY t."startTime", t.request_id LIMIT :limit""",
            params,
        )

    def session_keys(self, conn: Connection, f: KeyFilter, key: str, limit: int) -> list:
        """The proxy's ``session_id`` column (its ``litellm_session_id``; ``JUDGEFLOW_SESSION_KEY`` is the
        table source's), its time as :meth:`keys_sql` reads it."""
        clauses, params = utc_wall_filter(f, column='t."startTime"', id_sql="t.request_id")
        sql = (f"""SELECT t.request_id AS id, (t."startTime" AT TIME ZONE 'UTC') AS created_at, t.session_id """
               f"""FROM {self.table_sql} t WHERE {' AND '.join(clauses)} AND t.session_id <> '' """
               f"""ORDER BY t."startTime", t.request_id LIMIT :limit""")
        return [tuple(r) for r in conn.execute(text(sql), {**params, "limit": limit}).all()]

    def bodies(self, conn: Connection, keys: Sequence[TraceKey]) -> dict[str, TraceBody]:
        if not keys:
            return {}
        rows = conn.execute(
            text(
                f"""
                SELECT DISTINCT ON (t.request_id)
                    t.request_id, (t."startTime" AT TIME ZONE 'UTC') AS created_at, t.call_type, t.status,
                    t.cache_hit, t.model, t.model_group, t.team_id, t.end_user, t."user", t.request_tags,
                    t.session_id, t.proxy_server_request, t.response,
                    t.metadata -> 'error_information' AS error_information
                FROM {self.table_sql} t
                WHERE t.request_id = ANY(CAST(:ids AS text[])) AND t."startTime" = ANY(:ats)
                ORDER BY t.request_id, t."startTime"
                """
            ),
            {"ids": [k.id for k in keys], "ats": sorted({utc_wall(k.created_at) for k in keys})},
        ).mappings().all()
        return {r["request_id"]: trace_of(dict(r)) for r in rows}

    def has_id(self, conn: Connection, trace_id: str) -> bool:
        return bool(conn.execute(
            text(f"SELECT EXISTS (SELECT 1 FROM {self.table_sql} t WHERE t.request_id = :id)"), {"id": trace_id}
        ).scalar())

    def unusable(self, conn: Connection, *, lo: datetime | None, full: bool, timeout_s: float = 60.0) -> UnusableRows:
        """request_id and "startTime" are NOT NULL in LiteLLM's schema, and request_id is
        the primary key of a plain table; a partitioned one (keyed by request_id and
        "startTime") can repeat an id, which this counts."""
        return count_unusable_rows(
            conn, relation_sql=f"{self.table_sql} t", id_sql="t.request_id", time_sql='t."startTime"',
            since=None if full else lo, since_bound=None if full or lo is None else utc_wall(lo), window=not full,
            timeout_s=timeout_s,
        )

    def listing_sql(self) -> dict[str, str]:
        return {
            "null_id": f"SELECT * FROM {self.table_sql} WHERE request_id IS NULL;",
            "null_created_at": f'SELECT * FROM {self.table_sql} WHERE "startTime" IS NULL;',
            "duplicate_ids": (
                f'SELECT request_id, count(*), min("startTime"), max("startTime") FROM {self.table_sql} '
                "GROUP BY request_id HAVING count(*) > 1;"
            ),
        }

    def check(self, conn: Connection) -> list[tuple[str, str]]:
        found = catalog.columns(conn, self.table_sql)
        if not found:
            return [(
                "MISSING",
                f"LiteLLM's table {self.display} does not exist (JUDGEFLOW_SOURCE=litellm): point "
                "JUDGEFLOW_SOURCE_DATABASE_URL (or JUDGEFLOW_DATABASE_URL) at the proxy's database, and "
                "JUDGEFLOW_SOURCE_SCHEMA at its schema if it is not on the search_path",
            )]
        out = [("ok", f"LiteLLM's table {self.display} found")]
        missing = [c for c in REQUIRED_COLUMNS if c not in found]
        if missing:
            out.append((
                "MISSING",
                f"{self.display} lacks column(s) {', '.join(missing)}: the proxy's migrations add them; "
                "upgrade the LiteLLM proxy",
            ))
            return out
        out.append(self._index_line(conn))
        out.append(self._prompts_line(conn))
        return out

    def _index_line(self, conn: Connection) -> tuple[str, str]:
        create = (
            f'CREATE INDEX CONCURRENTLY "LiteLLM_SpendLogs_startTime_request_id_idx" ON {self.table_sql} '
            '("startTime", request_id);'
        )
        found = [i for i in catalog.indexes(conn, self.table_sql) if i.valid and i.predicate is None]
        for index in found:
            if index.leads_with(*KEY_INDEX_COLUMNS):
                return ("ok", f'index {index.name} on {self.display}("startTime", request_id): keys are read '
                              "oldest first through the proxy's indexes, from the run's watermark on")
        for index in found:
            if index.leads_with("startTime"):
                return (
                    "warn",
                    f'{self.display} has {index.name} on "startTime" but not the proxy\'s ("startTime", request_id): '
                    f"runs sort the keys of each page by id; the proxy's migrations create it: {create}",
                )
        return ("MISSING", f'index on {self.display}("startTime", request_id) (the proxy creates it): {create}')

    def _prompts_line(self, conn: Connection) -> tuple[str, str]:
        rows = conn.execute(
            text(
                "SELECT (t.proxy_server_request IS NULL OR t.proxy_server_request = '{}'::jsonb) AS empty "
                f"FROM {self.table_sql} t WHERE t.status IS DISTINCT FROM 'failure' "
                'ORDER BY t."startTime" DESC LIMIT :n'
            ),
            {"n": RECENT_CALLS},
        ).scalars().all()
        if not rows:
            return ("note", f"{self.display} holds no successful call yet: cannot tell whether prompts are stored")
        empty = sum(1 for e in rows if e)
        advice = (
            "set store_prompts_in_spend_logs: true under general_settings in the proxy's config (or "
            "STORE_PROMPTS_IN_SPEND_LOGS=true); a call logged without its request body is skipped"
        )
        if empty == len(rows):
            return ("MISSING", f"LiteLLM is not storing prompts: none of the last {len(rows)} calls has a request body; {advice}")
        if empty:
            return ("warn", f"{empty} of the last {len(rows)} calls in {self.display} have no stored request body; {advice}")
        return ("ok", f"LiteLLM stores prompts: each of the last {len(rows)} calls has its request body")
