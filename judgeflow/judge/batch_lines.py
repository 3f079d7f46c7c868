"""The lines of a batch file: each request's deterministic ``custom_id``, and a round packed into files.

A line's ``custom_id`` is a hash of the pair (trace, metric), the step, the
attempt and the request body the provider receives: the same request of the
same pair, asked by another run (after this one was killed, stopped or ran out
of time), has the same id, which is how that run finds it in a batch already
out (judgeflow/db/judge_batches.py) instead of paying for it again. The body
holds the prompt, so a new metric version or judge model is another id. The
attempt is in it because a line that failed is asked again in the next round,
a new line beside the failed one. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

ID_PREFIX = "jf-"
# the provider will not answer the rest of such a batch ("lost": it does not know the batch at all)
DEAD = ("expired", "cancelled", "failed", LOST := "lost")
ENDED = ("completed", *DEAD)  # the provider's last word on a batch


def custom_id(pair: tuple[str, str] | None, step: str, body: dict[str, Any], attempt: int) -> str:
    """The line's id (the module doc): at most 64 characters, whatever the trace id."""
    digest = hashlib.sha256()
    for part in (json.dumps(list(pair or ()), ensure_ascii=False), step, str(attempt)):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    digest.update(json.dumps(body, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
    return ID_PREFIX + digest.hexdigest()[:48]


@dataclass(frozen=True)
class FileLimits:
    """What one batch file may hold (OpenAI's: 50,000 requests, 200 MB)."""

    max_lines: int = 50_000
    max_bytes: int = 200 * 1024 * 1024


@dataclass(frozen=True)
class BatchLine:
    """One request of a batch on record: the pair it is for, its step and its ``custom_id``."""

    custom_id: str
    trace_id: str
    metric: str
    step: str


@dataclass(frozen=True)
class LineOnRecord:
    """What the record says of one ``custom_id``: the live batch that carries
    it (None: none), how many dead batches carried it, and the last one's status."""

    live_batch: str | None
    dead_batches: int
    dead_status: str | None = None


def jsonl_line(line: dict[str, Any]) -> bytes:
    return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


# what a file's line holds besides its body: its custom_id, method and url
LINE_OVERHEAD_BYTES = 160


def pack(bodies: list[dict[str, Any]], limits: FileLimits) -> list[list[dict[str, Any]]]:
    """The request ``bodies`` in order, in as few files as ``limits`` allow (a
    line larger than a file alone still gets a file of its own: the provider
    says why it refuses it)."""
    files: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for line in bodies:
        n = len(jsonl_line(line)) + LINE_OVERHEAD_BYTES
        if current and (len(current) >= limits.max_lines or size + n > limits.max_bytes):
            files.append(current)
            current, size = [], 0
        current.append(line)
        size += n
    if current:
        files.append(current)
    return files
