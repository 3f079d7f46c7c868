"""The lines of a batch: each request's deterministic ``custom_id``, and what the record says of one.

A line's ``custom_id`` is a hash of the pair (trace, metric), the step, the
line's number and the request body the provider receives: the same request of
the same pair, asked by another run (after this one was killed, stopped or ran
out of time), has the same id, which is how that run finds it in a batch
already out (judgeflow/db/judge_batches.py) instead of paying for it again. The
body holds the prompt, so a new metric version or judge model is another id.
The number is in it because a line the provider answered with an error is
asked again in the next round (``JUDGEFLOW_JUDGE_BATCH_LINE_RETRY=batch``), a
new line beside the failed one: it counts those errors, not the retry loop's
attempts, so an attempt that failed on the run's side is the same line again
and every run numbers a request's lines alike (judgeflow/judge/batches.py).
Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from judgeflow.judge.base import JudgeReply

ID_PREFIX = "jf-"
# the provider will not answer the rest of such a batch ("lost": it does not know the batch at all)
DEAD = ("expired", "cancelled", "failed", LOST := "lost")
ENDED = ("completed", *DEAD)  # the provider's last word on a batch
# a batch on record before it is created (its intent): its id on record is its token, which the batch carries
# in its metadata under TOKEN_KEY, so that a run finds it at the provider if its creator died before learning it
CREATING = "creating"
SUBMITTED = "submitted"  # a batch's status on record from its creation until the provider's first word on it
TOKEN_KEY = "judgeflow_token"
_TOKEN_PREFIX = "jf-batch-"


def intent_token() -> str:
    """A new batch's token: unique, and saying when it was made (epoch seconds), so that a run looking
    for its batch at the provider looks no further back than that (:func:`token_time`)."""
    return f"{_TOKEN_PREFIX}{int(time.time())}-{uuid.uuid4().hex[:16]}"


def is_token(batch_id: str | None) -> bool:
    """``batch_id`` on record is an intent's token (the provider's id not known yet), not a batch's id."""
    return bool(batch_id) and batch_id.startswith(_TOKEN_PREFIX)


def token_time(token: str) -> float:
    """When ``token`` was made (epoch seconds)."""
    return float(token.removeprefix(_TOKEN_PREFIX).split("-", 1)[0])


def custom_id(pair: tuple[str, str] | None, step: str, body: dict[str, Any], line_no: int) -> str:
    """The line's id (the module doc): at most 64 characters, whatever the trace id. ``line_no``:
    the lines of the same call the provider answered with an error before this one."""
    digest = hashlib.sha256()
    for part in (json.dumps(list(pair or ()), ensure_ascii=False), step, str(line_no)):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    digest.update(json.dumps(body, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
    return ID_PREFIX + digest.hexdigest()[:48]


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
    it (None: none), how many dead batches carried it, the last one's status,
    the completed batch whose output holds its answer, collected by a run
    that did not store its pair (None: none; judgeflow/db/judge_batches.py),
    and the answer it got online after the provider failed it, its pair not
    stored since (None: none)."""

    live_batch: str | None
    dead_batches: int
    dead_status: str | None = None
    answered_in: str | None = None
    answered_online: JudgeReply | None = None
