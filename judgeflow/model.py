"""What flows hand to tasks and tasks hand back: plain, picklable values
(never engines or connections)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

# A registered metric's name (judgeflow/metrics/registry.py): any string here,
# checked against the registry where a run or a command starts.
MetricName = str


class TraceWork(BaseModel):
    """One claimed (trace, metric) pair with the trace's content."""

    trace_id: str
    metric: MetricName
    created_at: datetime
    input: str | None = None
    output: str | None = None
    context: Any = None
    metadata: Any = None
    # the values of metadata's stored segment keys (Settings.stored_segment_keys), stored with the result
    segment: dict[str, str] = {}
    # set: not judged, stored as 'skipped' with this reason (TraceBody.skip: a source preset's verdict)
    skip_reason: str | None = None
    # the database's error when the source row could not be read: stored as a
    # failed result (invalid_trace) without a judge call
    read_error: str | None = None
    # a session's pair (trace_id: its result id, judgeflow/sources/session_id.py): the turns it had
    # when claimed; ``context`` then holds the conversation, [{"input", "output"}, ...] in turn order
    turns: int | None = None


class Cursor(BaseModel):
    """Keyset position of a run's reads: keys are taken in (created_at,
    trace_id) order, so a run never re-reads rows it has passed. ``phase``:
    "night" / "earlier" (a sample budget's selected traces, tonight's then
    earlier nights', in rank order: judgeflow/sampling/order.py), "retry"
    (failed pairs older than the window, from eval_results) or "window" (the
    source's keys)."""

    created_at: datetime
    trace_id: str
    metric: str = ""
    phase: Literal["night", "earlier", "retry", "window", "sessions"] = "window"


class ClaimedBatch(BaseModel):
    items: list[TraceWork]
    # position of the last candidate looked at (claimed or not); None = source exhausted
    cursor: Cursor | None


class ScoreOutcome(BaseModel):
    """What happened to one (trace, metric), for the run summary."""

    trace_id: str
    metric: MetricName
    # superseded: judged, but the pair's claim had moved to another run (its
    # result stands); taken_over: the claim had moved before the judge was called;
    # deferred: not scored, its claim given back (the run's time budget ran out)
    status: Literal["scored", "skipped", "failed", "superseded", "taken_over", "deferred"]
    score: float | None = None
    passed: bool | None = None
    reason: str | None = None
    error: str | None = None
    error_kind: str | None = None
    judge_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache
    cost_usd: float | None = None
    attempts: int = 1
    reused: bool = False  # copied from an identical pair's result: no judge call (judgeflow/run/reuse.py)
