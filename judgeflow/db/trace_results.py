"""One trace's results, for people: ``judgeflow show TRACE_ID``.

Per metric: the stored result (score, pass/fail, reason, the judge's verdicts
or reasons, judge model and metric version, the judge epoch it belongs to when
epochs are recorded, cost and calls, when and by which flow run it was
written, whether it was copied from an identical trace, for a Phoenix source
whether it is in Phoenix and the write-back's last error), or, without a result,
whether a run holds the pair now. With a Phoenix source an id judgeflow knows
nothing of may be a Phoenix trace id or the id of any span of a trace: the
trace's LLM spans are shown (:func:`look_up`). Read-only."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from judgeflow.db.engine import engine_for, source_engine
from judgeflow.errors import ConfigError, DatabaseError, JudgeflowError
from judgeflow.config.settings import Settings
from judgeflow.metrics.registry import metric_names

_RESULTS = text(
    "SELECT metric, metric_version, status, score, passed, threshold, reason, details, judge_model, "
    "prompt_tokens, completion_tokens, cached_tokens, cost_usd, judge_calls, error, error_kind, attempts, failed_runs, "
    "flow_run_id, trace_created_at, scored_at, content_hash, source, written_back_at, write_back_error, "
    "write_back_tries, write_back_next_at = 'infinity' AS write_back_given_up "
    "FROM judgeflow.eval_results WHERE trace_id = :id"
)
_CLAIMS = text(
    "SELECT metric, owner, lease_expires_at, lease_expires_at > now() AS live "
    "FROM judgeflow.claims WHERE trace_id = :id"
)
# the epoch a result belongs to: the latest of its source, metric and version
# started by the time it was written (judgeflow/db/epochs.py records them)
_EPOCH = text(
    "SELECT started_at, judge_model FROM judgeflow.judge_epochs "
    "WHERE source = :source AND metric = :metric AND metric_version = :version AND started_at <= :at "
    "ORDER BY started_at DESC, id DESC LIMIT 1"
)
_SOURCE_TIMEOUT_MS = 5000


@dataclass
class MetricView:
    metric: str
    result: dict[str, Any] | None = None
    claim: dict[str, Any] | None = None
    epoch_started_at: datetime | None = None
    other_source: str | None = None  # the result belongs to another source than the configured one


@dataclass
class TraceView:
    trace_id: str
    metrics: list[MetricView] = field(default_factory=list)
    in_source: bool | None = None  # None: not asked (it has results) or could not tell
    # a Phoenix source: the span's (Phoenix trace id, project), or "gone" when Phoenix no longer holds it
    phoenix_home: tuple[str, str] | str | None = None

    @property
    def known(self) -> bool:
        return self.in_source is True or any(m.result or m.claim or m.other_source for m in self.metrics)


def find_trace(settings: Settings, trace_id: str) -> TraceView:
    """What judgeflow's tables say about ``trace_id``; the source is asked
    only when they hold nothing about it."""
    _check_id(trace_id)
    from judgeflow.db.result_sources import adopt_configured_source

    view = TraceView(trace_id)
    try:
        source = adopt_configured_source(engine_for(settings), settings).source
        with engine_for(settings).connect() as conn:
            results = {r["metric"]: dict(r) for r in conn.execute(_RESULTS, {"id": trace_id}).mappings()}
            claims = {r["metric"]: dict(r) for r in conn.execute(_CLAIMS, {"id": trace_id}).mappings()}
            has_epochs = conn.execute(text("SELECT to_regclass('judgeflow.judge_epochs') IS NOT NULL")).scalar()
            for metric in metric_names():
                mv = MetricView(metric, results.get(metric), claims.get(metric))
                if mv.result and mv.result["source"] != source:  # counted for its own source only
                    mv.other_source, mv.result = mv.result["source"], None
                if has_epochs and mv.result and mv.result["metric_version"]:
                    mv.epoch_started_at = conn.execute(_EPOCH, {
                        "source": source, "metric": metric, "version": mv.result["metric_version"], "at": mv.result["scored_at"],
                    }).scalar()
                view.metrics.append(mv)
    except DBAPIError as exc:
        raise DatabaseError(f"could not read the results of {trace_id!r}: {type(exc.orig).__name__}: {exc.orig}") from None
    if not (results or claims):  # a result of another source is known too: it is said so
        view.in_source = _in_source(settings, trace_id)
    return view


@dataclass
class Lookup:
    """What `judgeflow show` found for an id: one trace, or with a Phoenix source the
    LLM spans of the Phoenix trace the id names (its trace id or any span's id)."""

    views: list[TraceView]
    phoenix_trace_id: str | None = None

    @property
    def known(self) -> bool:
        return self.phoenix_trace_id is not None or any(v.known for v in self.views)


def look_up(settings: Settings, some_id: str) -> Lookup:
    """:func:`find_trace`; with a Phoenix source, an id judgeflow knows nothing of and
    that is no LLM span is looked for as a Phoenix trace id or the id of any span.
    Phoenix's ids are lower-case hex: one typed in upper case is found too. Each
    span shown is named with its Phoenix trace and project."""
    if settings.source != "phoenix":
        return Lookup([find_trace(settings, some_id)])
    if _HEX.fullmatch(some_id):
        some_id = some_id.lower()
    view = find_trace(settings, some_id)
    if view.known:
        return Lookup([_with_phoenix_home(settings, view)])
    found = _phoenix_trace(settings, some_id)
    if found is None:
        return Lookup([view])
    trace_id, spans = found
    return Lookup([_with_phoenix_home(settings, find_trace(settings, span)) for span in spans],
                  phoenix_trace_id=trace_id)


_HEX = re.compile(r"[0-9A-Fa-f]+")


def _with_phoenix_home(settings: Settings, view: TraceView) -> TraceView:
    from judgeflow.sources.trace_source import trace_source

    source = trace_source(settings)
    try:
        with source_engine(settings).connect() as conn:
            with conn.begin():
                conn.execute(text(f"SET LOCAL statement_timeout = {_SOURCE_TIMEOUT_MS}"))
                view.phoenix_home = source.span_home(conn, view.trace_id) or "gone"
    except DBAPIError:
        view.phoenix_home = None  # Phoenix's database could not be asked: the results are shown without it
    return view


def _phoenix_trace(settings: Settings, some_id: str) -> tuple[str, list[str]] | None:
    from judgeflow.sources.trace_source import trace_source

    source = trace_source(settings)
    try:
        with source_engine(settings).connect() as conn:
            with conn.begin():
                conn.execute(text(f"SET LOCAL statement_timeout = {_SOURCE_TIMEOUT_MS}"))
                return source.llm_spans_of(conn, some_id)
    except DBAPIError as exc:
        return _source_failure(exc, source.display, some_id)


def _check_id(trace_id: str) -> None:
    """An id PostgreSQL can take as text: UTF-8 (a shell passes other bytes as lone surrogates), no NUL."""
    try:
        trace_id.encode("utf-8")
    except UnicodeEncodeError:
        raise JudgeflowError(f"trace id {trace_id!r} is not UTF-8 text; no trace can have it") from None
    if "\x00" in trace_id:
        raise JudgeflowError(f"trace id {trace_id!r} holds a NUL character; no trace can have it")


def _in_source(settings: Settings, trace_id: str) -> bool | None:
    """Whether the trace source has a row with this id (None: it did not answer in time).
    A source that is missing or fails otherwise raises ``ConfigError`` / ``DatabaseError``."""
    from judgeflow.sources.table import SourceTable
    from judgeflow.sources.trace_source import trace_source

    table = SourceTable.parse(settings.traces_table)
    source = trace_source(settings)
    try:
        with source_engine(settings).connect() as conn:
            with conn.begin():
                conn.execute(text(f"SET LOCAL statement_timeout = {_SOURCE_TIMEOUT_MS}"))
                if hasattr(source, "has_id"):  # a source preset: its own key column
                    return source.has_id(conn, trace_id)
                return conn.execute(
                    text(f"SELECT EXISTS (SELECT 1 FROM {table.sql} t WHERE t.id::text = :id)"), {"id": trace_id}
                ).scalar()
    except DBAPIError as exc:
        return _source_failure(exc, source.display, trace_id)


_TIMED_OUT = "57014"  # query_canceled: the statement timeout above
_NO_SUCH_RELATION = {"42P01": "does not exist", "3F000": "does not exist (no such schema)",
                     "42703": "has no such column"}


def _source_failure(exc: DBAPIError, display: str, trace_id: str) -> None:
    """None when the source did not answer in time; any other failure is an error naming it."""
    state = getattr(exc.orig, "sqlstate", None)
    if state == _TIMED_OUT:
        return None
    first_line = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
    if state in _NO_SUCH_RELATION:
        raise ConfigError(f"the trace source {display} {_NO_SUCH_RELATION[state]} ({first_line}); "
                          "check JUDGEFLOW_TRACES_TABLE or the source preset")
    raise DatabaseError(f"could not ask {display} about {trace_id!r}: {type(exc.orig).__name__}: {first_line}")


def render_lookup(lookup: Lookup, *, ui_url: str | None, source_name: str) -> str:
    """`judgeflow show`'s text: the trace, or the Phoenix trace's LLM spans one after the other."""
    if lookup.phoenix_trace_id is None:
        return render(lookup.views[0], ui_url=ui_url, source_name=source_name)
    n = len(lookup.views)
    head = (f"Phoenix trace {lookup.phoenix_trace_id}: {n} LLM span(s), each judged on its own"
            if n else f"Phoenix trace {lookup.phoenix_trace_id} has no LLM span: judgeflow judges LLM spans only")
    return "\n".join([head, *(render(v, ui_url=ui_url, source_name=source_name, label="LLM span")
                              for v in lookup.views)])


def render(view: TraceView, *, ui_url: str | None, source_name: str, label: str = "trace") -> str:
    lines = [f"{label} {view.trace_id}"]
    if isinstance(view.phoenix_home, tuple):
        lines.append(f"  in Phoenix: trace {view.phoenix_home[0]}, project {view.phoenix_home[1]}")
    elif view.phoenix_home == "gone":
        lines.append("  in Phoenix: no longer held (its retention, or a user, deleted the span)")
    if view.in_source is not None and not any(m.result or m.claim for m in view.metrics):
        lines.append(f"  in {source_name}, not scored yet: the next run scores it")
    for mv in view.metrics:
        lines += _metric_lines(mv, ui_url)
    return "\n".join(lines)


def _when(at: datetime | None) -> str:
    return "unknown time" if at is None else at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def _metric_lines(mv: MetricView, ui_url: str | None) -> list[str]:
    r = mv.result
    if mv.other_source is not None:
        return [f"  {mv.metric}: no result of the configured source; the result stored under this id was read "
                f"from {mv.other_source}, another source (not counted here)"]
    if r is None:
        if mv.claim is None:
            return [f"  {mv.metric}: no result yet (pending)"]
        run = mv.claim["owner"].split(":", 1)[0]
        state = "being scored now" if mv.claim["live"] else "claimed by a run that stopped (the next run takes it)"
        return [f"  {mv.metric}: no result yet, {state} by flow run {run}"]
    out: list[str] = []
    if r["status"] == "scored":
        verdict = "passed" if r["passed"] else "FAILED"
        threshold = "" if r["threshold"] is None else f" (threshold {r['threshold']:g})"
        out.append(f"  {mv.metric}: score {r['score']:.3f}, {verdict}{threshold}")
    elif (r["details"] or {}).get("skipped_by_source"):
        return _preset_skip_lines(mv.metric, r, ui_url)
    elif r["status"] == "skipped":
        out.append(f"  {mv.metric}: skipped (the judge abstained)")
    else:
        out.append(f"  {mv.metric}: scoring failed ({r['error_kind'] or 'error'}) after {r['attempts']} attempt(s)"
                   f" in {r['failed_runs']} run(s); the next run tries again")
        out.append(f"    error: {_one_line(r['error'])}")
    if r["reason"]:
        out.append(f"    reason: {_one_line(r['reason'])}")
    details = r["details"] or {}
    for v in details.get("verdicts") or []:
        why = f" - {_one_line(v.get('reason'))}" if v.get("reason") else ""
        out.append(f"    verdict {v.get('verdict')}: {_one_line(v.get('opinion'))}{why}")
    reasons = [str(x) for x in details.get("reasons") or []]
    if " ".join(reasons) != (r["reason"] or ""):  # the reason is usually these, joined
        out += [f"    judge's reason: {_one_line(x)}" for x in reasons]
    judge = r["judge_model"] or "unknown judge"
    version = r["metric_version"] or "no metric version (failed before the judge answered)"
    epoch = f"; judge epoch since {_when(mv.epoch_started_at)}" if mv.epoch_started_at else ""
    out.append(f"    judge: {judge}, metric version {version}{epoch}")
    if details.get("reused_from"):
        out.append(f"    reused: copied from identical trace {details['reused_from']} (no judge call)")
    if r["written_back_at"] is not None and r["written_back_at"] >= r["scored_at"]:
        out.append(f"    in Phoenix: written as a span annotation at {_when(r['written_back_at'])}")
    elif r["status"] == "scored" and (r["source"] or "").startswith("phoenix:"):
        out.append(_write_back_line(r))
    cost = "unknown" if r["cost_usd"] is None else f"${r['cost_usd']:.6f}"
    out.append(f"    cost: {cost}, {r['judge_calls']} judge call(s), "
               f"{r['prompt_tokens']}/{r['completion_tokens']} tokens (prompt/completion), "
               f"{r['cached_tokens']} of the prompt's from the provider's cache")
    run = r["flow_run_id"]
    link = f"  {ui_url}/runs/flow-run/{run}" if run and ui_url else ""
    out.append(f"    written: {_when(r['scored_at'])} by flow run {run or 'unknown'}{link}")
    return out


def _write_back_line(r: dict) -> str:
    """Where the result's Phoenix write-back stands, with its last error."""
    error = f"; last error: {_one_line(r['write_back_error'], 300)}" if r["write_back_error"] else ""
    if r.get("write_back_given_up"):
        return (f"    in Phoenix: not written for good, refused {r['write_back_tries']} tries (no run or sync tries it "
                f"again; `judgeflow phoenix sync --repair` tries once more){error}")
    return f"    in Phoenix: not written yet{error}"


def _preset_skip_lines(metric: str, r: dict, ui_url: str | None) -> list[str]:
    """A pair the source preset decided not to judge: its reason, and that nothing was spent."""
    preset = (r["source"] or "the source").split(":", 1)[0]
    run = r["flow_run_id"]
    link = f"  {ui_url}/runs/flow-run/{run}" if run and ui_url else ""
    return [
        f"  {metric}: skipped by the {preset} preset: {_one_line(r['reason']) or 'no reason given'}",
        "    the preset's decision: no judge was asked, nothing was spent",
        f"    written: {_when(r['scored_at'])} by flow run {run or 'unknown'}{link}",
    ]


def _one_line(value: Any, limit: int = 300) -> str:
    s = " ".join(str(value if value is not None else "").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def lookup_json(lookup: Lookup, *, ui_url: str | None) -> dict[str, Any]:
    """`judgeflow show --json`: the same facts as the text, as data. Each metric's ``state``:
    scored, skipped, failed (the judge could not score it), in_progress, stranded, pending,
    or other_source (the id's result was read from another source than the configured one)."""
    return {"phoenix_trace_id": lookup.phoenix_trace_id,
            "traces": [_view_json(view, ui_url) for view in lookup.views]}


def _view_json(view: TraceView, ui_url: str | None) -> dict[str, Any]:
    return {"trace_id": view.trace_id, "in_source": view.in_source,
            "metrics": [_metric_json(mv, ui_url) for mv in view.metrics]}


def _metric_json(mv: MetricView, ui_url: str | None) -> dict[str, Any]:
    r, claim = mv.result, mv.claim
    if mv.other_source is not None:
        state = "other_source"
    elif r is not None:
        state = r["status"]
    elif claim is not None:
        state = "in_progress" if claim["live"] else "stranded"
    else:
        state = "pending"
    run = r["flow_run_id"] if r else None
    return {
        "metric": mv.metric, "state": state, "result": r,
        "claim": None if claim is None else {**claim, "flow_run_id": claim["owner"].split(":", 1)[0]},
        "epoch_started_at": mv.epoch_started_at, "other_source": mv.other_source,
        "flow_run_url": f"{ui_url}/runs/flow-run/{run}" if run and ui_url else None,
    }
