"""Scores written to Arize Phoenix as span annotations, over Phoenix's public REST API.

A session's result (issue 57; its trace_id a session result id) is written as a session
annotation instead (``POST /v1/session_annotations``, Phoenix 12.0 and later: the version
tested, 20.26, takes them), on the session whose ``session.id`` is the session's key, with
the same name, identifier, label, score and reason, and the turns it saw in its metadata.

With ``JUDGEFLOW_SOURCE=phoenix`` a judged trace is an LLM span; each of its scored
results becomes one annotation on that span (``POST /v1/span_annotations``): name
``judgeflow.<metric>``, identifier ``judgeflow``, ``annotator_kind`` LLM, label ``pass``
or ``fail``, the score and the reason. Phoenix keeps one annotation per (name, span,
identifier) and updates it on a second write, so a re-run or a re-score never
duplicates one. Which results still have to be written, and their retries, is the
outbox's (judgeflow/phoenix/outbox.py); this module only speaks HTTP.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from judgeflow.config.scrub import origin
from judgeflow.sources.session_id import is_session_id

IDENTIFIER = "judgeflow"
BATCH = 100
SPANS_PATH, SESSIONS_PATH = "/v1/span_annotations", "/v1/session_annotations"
# Phoenix's refusal of a sync write naming sessions it does not hold (as it names spans)
UNKNOWN_SESSIONS = "Sessions with IDs"
# a refusal of the key: stop at once, no other write can succeed
AUTH_REFUSED = (401, 403)
# the request as a whole went nowhere (a wrong prefix: Phoenix answers 405 to a POST
# its web pages take, another server 404): stop, unless Phoenix named the spans
REQUEST_REFUSED = (404, 405)
# Phoenix or a proxy in front of it is busy or failing: the batch is retried later
TRANSIENT = (408, 425, 429)
DETAIL_CHARS = 200


def _detail(reply: httpx.Response) -> str:
    """What Phoenix said about a refusal: its JSON ``detail`` or its plain-text body
    (``Spans with IDs ... do not exist.``), never an HTML page or anything naming a URL."""
    kind = reply.headers.get("content-type", "")
    if "json" in kind:
        try:
            body = reply.json()
        except ValueError:
            return ""
        detail = body.get("detail") if isinstance(body, dict) else None
    else:
        detail = reply.text if kind.startswith("text/plain") else None
    if not isinstance(detail, str):
        return ""
    text = " ".join(detail.split())
    return "" if "://" in text else text


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def _error(exc: httpx.HTTPError) -> str:
    """An HTTP client error in one line, any URL in it cut to its scheme, host and port."""
    return _URL.sub(lambda m: origin(m.group(0)), " ".join(f"{type(exc).__name__}: {exc}".split()))


def annotation_name(metric: str) -> str:
    return f"judgeflow.{metric}"


def is_session_row(result: dict[str, Any]) -> bool:
    """A session's result (its trace_id a session result id): written as a session annotation, never a span's."""
    return is_session_id(str(result["trace_id"]))


def target(result: dict[str, Any]) -> str:
    """What Phoenix knows the row's annotation target by: the span id, or the session's ``session.id``."""
    return str(result.get("session_key") if is_session_row(result) else result["trace_id"])


def annotation(result: dict[str, Any]) -> dict[str, Any]:
    """One eval_results row as Phoenix's annotation payload: a span's (``POST /v1/span_annotations``), or for a
    session's result a session's (``POST /v1/session_annotations``, its ``session_id`` the session's
    ``session.id`` value, with the turns it saw)."""
    where = {"session_id": result.get("session_key")} if is_session_row(result) else {"span_id": result["trace_id"]}
    metadata = {
        "judge_model": result.get("judge_model"), "metric_version": result.get("metric_version"),
        "threshold": result.get("threshold"), "flow_run_id": result.get("flow_run_id"),
    }
    if is_session_row(result):
        metadata["turns"] = (result.get("details") or {}).get("turns")
    return {
        **where,
        "name": annotation_name(result["metric"]),
        "annotator_kind": "LLM",
        "identifier": IDENTIFIER,
        "result": {
            "label": "pass" if result["passed"] else "fail",
            "score": result["score"],
            "explanation": result.get("reason"),
        },
        "metadata": metadata,
    }


def phoenix_client(base_url: str, api_key: str | None, *, timeout_s: float = 30.0) -> httpx.Client:
    """The one place a client of Phoenix's REST API is made (the key as a bearer token)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)


@dataclass
class Posted:
    """What became of results posted by :func:`post_annotations`, by their index."""

    written: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)  # Phoenix named this one's span as one it does not hold
    failed: dict[int, str] = field(default_factory=dict)  # not written for now: retried later
    stop: str | None = None  # why the rest was not tried: the key or the request refused, Phoenix unreachable
    auth_refused: bool = False
    request_refused: bool = False


def _named(reply: httpx.Response, results: list[dict[str, Any]], batch: list[int]) -> list[int]:
    """The results of ``batch`` whose span (or session) Phoenix names in its refusal."""
    detail = _detail(reply)
    words = set(re.split(r"[\s,;:'\"()\[\]]+|\.(?:\s|$)", detail))
    # a session.id is the user's text (spaces, commas ...): found in the detail as it was sent
    return [i for i in batch if target(results[i]) in words
            or (is_session_row(results[i]) and detail.startswith(UNKNOWN_SESSIONS) and target(results[i]) in detail)]


def _refusal(out: Posted, reply: httpx.Response, base_url: str) -> None:
    """A refusal of the whole request: the key, or the annotations endpoint not being at the URL."""
    status, where = reply.status_code, origin(base_url)
    if status in AUTH_REFUSED:
        out.auth_refused = True
        out.stop = (f"Phoenix at {where} refused the API key (HTTP {status}): set JUDGEFLOW_PHOENIX_API_KEY "
                    "to a key Phoenix accepts for writing annotations")
    else:
        out.request_refused = True
        out.stop = (f"Phoenix at {where} refused the annotation request itself (HTTP {status}): "
                    "JUDGEFLOW_PHOENIX_URL is not Phoenix's base URL (the address its UI opens at, without a "
                    "path such as /v1); `judgeflow db check` tests it")


def _batches(results: list[dict[str, Any]]) -> list[list[int]]:
    """The results' indexes in batches of :data:`BATCH`, spans' and sessions' apart (two endpoints)."""
    kinds = ([i for i, r in enumerate(results) if not is_session_row(r)],
             [i for i, r in enumerate(results) if is_session_row(r) and r.get("session_key") is not None])
    return [kind[start:start + BATCH] for kind in kinds for start in range(0, len(kind), BATCH)]


def _gone(result: dict[str, Any], status: int) -> str:
    what = "session" if is_session_row(result) else "span"
    return f"Phoenix no longer holds {what} {target(result)} (HTTP {status})"


def post_annotations(client: httpx.Client, results: list[dict[str, Any]]) -> Posted:
    """POSTs ``results`` in batches of :data:`BATCH`: spans' to ``/v1/span_annotations``, sessions' to
    ``/v1/session_annotations``. Spans (sessions) Phoenix names as unknown
    are refused alone and the rest of their batch posted again. A refusal of the
    whole request (the key, a URL that is not Phoenix's API) or an unreachable
    Phoenix stops at once: what was not tried is in no list. Never raises."""
    out = Posted()
    base = str(client.base_url)
    # a session's result whose session judgeflow does not hold: nothing to name it by in Phoenix
    out.failed.update({i: "its session is not in judgeflow.sessions" for i, r in enumerate(results)
                       if is_session_row(r) and r.get("session_key") is None})
    todo = _batches(results)
    while todo and out.stop is None:
        batch = todo.pop(0)
        path = SESSIONS_PATH if is_session_row(results[batch[0]]) else SPANS_PATH
        try:
            reply = client.post(path, params={"sync": "true"}, json={"data": [annotation(results[i]) for i in batch]})
        except httpx.HTTPError as exc:
            error = _error(exc)
            if isinstance(exc, httpx.TransportError):
                # Phoenix does not answer: the rest would not either. A stop, so the batch in flight
                # counts no try, as none of the rest does (Phoenix keeps one annotation per span and
                # name: if it did store them, posting them again changes nothing)
                out.stop = f"Phoenix at {origin(base)} did not answer ({error})"
            else:
                out.failed.update({i: error for i in batch})
            continue
        status = reply.status_code
        if status < 300:
            out.written += batch
        elif status in TRANSIENT or status >= 500:
            detail = _detail(reply)
            out.failed.update({i: f"HTTP {status}" + (f": {detail[:DETAIL_CHARS]}" if detail else "") for i in batch})
        elif status in AUTH_REFUSED:
            _refusal(out, reply, base)
        elif named := _named(reply, results, batch):
            out.refused.update({i: _gone(results[i], status) for i in named})
            rest = [i for i in batch if i not in named]
            todo = ([rest] if rest else []) + todo
        elif status in REQUEST_REFUSED and not _detail(reply).startswith(UNKNOWN_SESSIONS):
            _refusal(out, reply, base)
        elif len(batch) > 1:  # refused for one annotation it does not name: found one by one
            todo = [[i] for i in batch] + todo
        else:
            detail = _detail(reply)
            what = "session" if is_session_row(results[batch[0]]) else "span"
            out.refused[batch[0]] = f"{what} {target(results[batch[0]])}: HTTP {status}" + (
                f": {detail[:DETAIL_CHARS]}" if detail else "")
    return out


def _path_hint(base_url: str) -> str:
    """Says the URL has a path (never which): Phoenix's base URL has none."""
    try:
        has_path = httpx.URL(base_url).path not in ("", "/")
    except Exception:
        return ""
    return " (JUDGEFLOW_PHOENIX_URL has a path; Phoenix's base URL usually has none, not even /v1)" if has_path else ""


def _is_api(reply: httpx.Response) -> bool:
    """Phoenix's REST API answers JSON with a ``data`` list; its web pages answer any other GET with HTML."""
    if "json" not in reply.headers.get("content-type", ""):
        return False
    try:
        body = reply.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("data"), list)


def check_access(base_url: str, api_key: str | None, *, timeout_s: float = 10.0) -> tuple[str, str]:
    """For `db check`: Phoenix's REST API answers JSON at ``base_url`` (``GET
    /v1/projects?limit=1``) and its annotations endpoint takes a write with the key
    (a POST of no annotation). (level, message), level ``ok`` or ``MISSING``."""
    where, hint = origin(base_url), _path_hint(base_url)
    try:
        with phoenix_client(base_url, api_key, timeout_s=timeout_s) as client:
            read = client.get("/v1/projects", params={"limit": 1})
            write = None
            if read.status_code == 200 and _is_api(read):
                write = client.post("/v1/span_annotations", params={"sync": "true"}, json={"data": []})
    except httpx.HTTPError as exc:
        return "MISSING", (f"Phoenix write-back: Phoenix at {where} does not answer ({_error(exc)}); "
                           "scores wait unwritten until it does")
    for reply, what in ((read, ""), (write, " for writing annotations")):
        if reply is not None and reply.status_code in AUTH_REFUSED:
            which = (f"JUDGEFLOW_PHOENIX_API_KEY was refused{what}" if api_key
                     else "Phoenix wants an API key: set JUDGEFLOW_PHOENIX_API_KEY")
            return "MISSING", f"Phoenix write-back: {where} answers, but {which} (HTTP {reply.status_code})"
    if read.status_code != 200:
        return "MISSING", (f"Phoenix write-back: {where} answered HTTP {read.status_code} to a read of Phoenix's "
                           f"REST API{hint}: is JUDGEFLOW_PHOENIX_URL Phoenix's base URL?")
    if write is None:
        return "MISSING", (f"Phoenix write-back: {where} answered a read of Phoenix's REST API with a web page, "
                           f"not the API's JSON{hint}: is JUDGEFLOW_PHOENIX_URL Phoenix's base URL?")
    if write.status_code >= 300:
        return "MISSING", (f"Phoenix write-back: {where} answers Phoenix's REST API, but its annotations endpoint "
                           f"answered HTTP {write.status_code}{hint}; scores cannot be written")
    key = "the API key accepted for writing" if api_key else "no API key needed"
    return "ok", f"Phoenix write-back: {where} answers Phoenix's REST API and takes annotations ({key})"
