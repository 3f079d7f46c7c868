"""Scores written to Arize Phoenix as span annotations, over Phoenix's public REST API.

With ``JUDGEFLOW_SOURCE=phoenix`` a judged trace is an LLM span; each of its scored
results becomes one annotation on that span (``POST /v1/span_annotations``): name
``judgeflow.<metric>``, identifier ``judgeflow``, ``annotator_kind`` LLM, label ``pass``
or ``fail``, the score and the reason. Phoenix keeps one annotation per (name, span,
identifier) and updates it on a second write, so a re-run or a re-score never
duplicates one. Which results still have to be written, and their retries, is the
outbox's (judgeflow/phoenix/outbox.py); this module only speaks HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from judgeflow.config.scrub import origin, without_endpoint_path

IDENTIFIER = "judgeflow"
BATCH = 100
# a refusal of the key: stop at once, no other write can succeed
AUTH_REFUSED = (401, 403)
# Phoenix or a proxy in front of it is busy or failing: the batch is retried later
TRANSIENT = (408, 425, 429)


def annotation_name(metric: str) -> str:
    return f"judgeflow.{metric}"


def annotation(result: dict[str, Any]) -> dict[str, Any]:
    """One eval_results row as Phoenix's span-annotation payload."""
    return {
        "span_id": result["trace_id"],
        "name": annotation_name(result["metric"]),
        "annotator_kind": "LLM",
        "identifier": IDENTIFIER,
        "result": {
            "label": "pass" if result["passed"] else "fail",
            "score": result["score"],
            "explanation": result.get("reason"),
        },
        "metadata": {
            "judge_model": result.get("judge_model"), "metric_version": result.get("metric_version"),
            "threshold": result.get("threshold"), "flow_run_id": result.get("flow_run_id"),
        },
    }


def phoenix_client(base_url: str, api_key: str | None, *, timeout_s: float = 30.0) -> httpx.Client:
    """The one place a client of Phoenix's REST API is made (the key as a bearer token)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)


@dataclass
class Posted:
    """What became of results posted by :func:`post_annotations`, by their index."""

    written: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)  # Phoenix refused this one (a span it does not hold)
    failed: dict[int, str] = field(default_factory=dict)  # not written for now: retried later
    stop: str | None = None  # why the rest was not tried: the key refused, Phoenix unreachable
    auth_refused: bool = False


def post_annotations(client: httpx.Client, results: list[dict[str, Any]]) -> Posted:
    """POSTs ``results`` in batches of :data:`BATCH`. A batch Phoenix refuses with a
    4xx is tried again one by one (it refuses a whole batch for one span it does not
    hold). A refused key or an unreachable Phoenix stops at once: what was not tried is
    in neither list. Never raises."""
    out = Posted()
    todo = [list(range(start, min(start + BATCH, len(results)))) for start in range(0, len(results), BATCH)]
    while todo:
        batch = todo.pop(0)
        try:
            reply = client.post("/v1/span_annotations", params={"sync": "true"},
                                json={"data": [annotation(results[i]) for i in batch]})
        except httpx.HTTPError as exc:
            error = without_endpoint_path(f"{type(exc).__name__}: {exc}", str(client.base_url))
            out.failed.update({i: error for i in batch})
            if isinstance(exc, httpx.TransportError):  # Phoenix does not answer: the rest would not either
                out.stop = f"Phoenix at {origin(str(client.base_url))} did not answer ({error})"
                return out
            continue
        status = reply.status_code
        if status in AUTH_REFUSED:
            out.auth_refused = True
            out.stop = (f"Phoenix at {origin(str(client.base_url))} refused the API key (HTTP {status}): set "
                        "JUDGEFLOW_PHOENIX_API_KEY to a key Phoenix accepts")
            return out
        if status < 300:
            out.written += batch
        elif status in TRANSIENT or status >= 500:
            body = without_endpoint_path(reply.text[:200], str(client.base_url))
            out.failed.update({i: f"HTTP {status}: {body}" for i in batch})
        elif len(batch) > 1:
            todo = [[i] for i in batch] + todo
        else:
            body = without_endpoint_path(reply.text[:200], str(client.base_url))
            out.refused[batch[0]] = f"span {results[batch[0]]['trace_id']}: HTTP {status}: {body}"
    return out


def check_access(base_url: str, api_key: str | None, *, timeout_s: float = 10.0) -> tuple[str, str]:
    """A harmless read of Phoenix's REST API (``GET /v1/projects?limit=1``) for `db check`:
    (level, message), level ``ok`` or ``MISSING``."""
    try:
        with phoenix_client(base_url, api_key, timeout_s=timeout_s) as client:
            reply = client.get("/v1/projects", params={"limit": 1})
    except httpx.HTTPError as exc:
        error = without_endpoint_path(f"{type(exc).__name__}: {exc}", base_url)
        return "MISSING", (f"Phoenix write-back: JUDGEFLOW_PHOENIX_URL {origin(base_url)} does not answer "
                           f"({error}); scores wait unwritten until it does")
    if reply.status_code in AUTH_REFUSED:
        which = ("JUDGEFLOW_PHOENIX_API_KEY was refused" if api_key
                 else "Phoenix wants an API key: set JUDGEFLOW_PHOENIX_API_KEY")
        return "MISSING", f"Phoenix write-back: {origin(base_url)} answers, but {which} (HTTP {reply.status_code})"
    if reply.status_code != 200:
        return "MISSING", (f"Phoenix write-back: {origin(base_url)} answered HTTP {reply.status_code}, not "
                           "Phoenix's REST API: is JUDGEFLOW_PHOENIX_URL Phoenix's base URL?")
    key = "the API key accepted" if api_key else "no API key needed"
    return "ok", f"Phoenix write-back: {origin(base_url)} answers Phoenix's REST API ({key})"
