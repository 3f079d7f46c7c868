"""What scoring a pair produced, as the row to store and the outcome to report.

Each builder returns ``(row, outcome)``: the result row for the results store
(:mod:`judgeflow.db.results_store`; None when nothing is stored and the claim
is given back) and the :class:`~judgeflow.model.ScoreOutcome` the run
summary and the budget count, its status assuming the row is written
(:func:`as_stored` corrects it once the store has answered). Every judge call
a pair's attempts made counts in both, at what :mod:`judgeflow.judge.spend`
says it cost.
"""

from __future__ import annotations

import logging

from judgeflow.db.results_store import ERROR_TEXT_MAX, StoredPairs
from judgeflow.db.storable import storable_count, storable_float, storable_row
from judgeflow.errors import InvalidJudgeReplyError, InvalidTraceError, PermanentJudgeError, TransientJudgeError
from judgeflow.judge.base import Usage
from judgeflow.metrics.result import MetricResult
from judgeflow.run import reuse
from judgeflow.model import ScoreOutcome, TraceWork

log = logging.getLogger("judgeflow.scoring")

_TEXT_FIELDS = ("reason", "error", "judge_model", "metric_version")
_JSON_FIELDS = ("details",)


def storable_result(row: dict) -> dict:
    """``row`` with every value PostgreSQL can hold (text without NUL, finite numbers)."""
    row = storable_row(row, text_fields=_TEXT_FIELDS, json_fields=_JSON_FIELDS)
    row["prompt_tokens"] = storable_count(row.get("prompt_tokens"))
    row["completion_tokens"] = storable_count(row.get("completion_tokens"))
    row["cached_tokens"] = storable_count(row.get("cached_tokens"))
    row["judge_calls"] = min(storable_count(row.get("judge_calls")), 2**31 - 1)
    row["cost_usd"] = storable_float(row.get("cost_usd"))
    row["latency_ms"] = storable_float(row.get("latency_ms"))
    return row


def _details(work: TraceWork, details: dict) -> dict:
    """A session's row says how many turns the judging saw: what marks it judged, and its history."""
    return details if work.turns is None else {**details, "turns": work.turns}


def result_row(work: TraceWork, result: MetricResult, attempts: int, flow_run_id: str | None) -> dict:
    return storable_result({
        "trace_id": work.trace_id, "metric": work.metric, "metric_version": result.metric_version,
        "status": result.status, "score": result.score, "passed": result.passed,
        "threshold": result.threshold, "reason": result.reason,
        "details": _details(work, result.details), "judge_model": result.judge_model,
        "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
        "cached_tokens": result.cached_tokens, "cost_usd": result.cost_usd, "latency_ms": result.latency_ms, "judge_calls": result.judge_calls,
        "error": None, "error_kind": None, "attempts": attempts, "flow_run_id": flow_run_id,
        "trace_created_at": work.created_at, "segment": work.segment, "content_hash": None,
    })


def failure_row(work: TraceWork, error: Exception, kind: str, attempts: int, flow_run_id: str | None) -> dict:
    details: dict = {}
    if isinstance(error, InvalidJudgeReplyError):
        details = {"step": error.step, "raw_reply": error.raw[:ERROR_TEXT_MAX], "repairs": error.attempts}
    return storable_result({
        "trace_id": work.trace_id, "metric": work.metric, "metric_version": None, "status": "failed",
        "score": None, "passed": None, "threshold": None, "reason": None,
        "details": _details(work, details), "judge_model": None, "prompt_tokens": 0, "completion_tokens": 0,
        "cached_tokens": 0, "cost_usd": None, "latency_ms": None, "judge_calls": 0,
        "error": f"{type(error).__name__}: {error}"[:ERROR_TEXT_MAX], "error_kind": kind,
        "attempts": attempts, "flow_run_id": flow_run_id, "trace_created_at": work.created_at,
        "segment": work.segment, "content_hash": None,
    })


def error_kind(error: Exception) -> str:
    if isinstance(error, InvalidTraceError):
        return "invalid_trace"
    if isinstance(error, InvalidJudgeReplyError):
        return "invalid_reply"
    if isinstance(error, PermanentJudgeError):
        return "judge_rejected"
    if isinstance(error, TransientJudgeError):
        return "judge_unavailable"
    return "internal"


def with_billed(result: MetricResult, billed: Usage) -> MetricResult:
    """The result with the earlier, failed attempts' calls added to its own."""
    if not billed.calls:
        return result
    cost = None if result.cost_usd is None and billed.cost_usd is None else (
        (result.cost_usd or 0.0) + (billed.cost_usd or 0.0)
    )
    return result.model_copy(update={
        "prompt_tokens": result.prompt_tokens + billed.prompt_tokens,
        "completion_tokens": result.completion_tokens + billed.completion_tokens,
        "cached_tokens": result.cached_tokens + billed.cached_tokens,
        "judge_calls": result.judge_calls + billed.calls,
        "cost_usd": cost,
    })


def success(work: TraceWork, result: MetricResult, attempt: int, flow_run_id: str | None,
            digest: str | None = None) -> tuple[dict, ScoreOutcome]:
    row = result_row(work, result, attempt, flow_run_id)
    row["content_hash"] = digest
    return row, ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status=result.status,
        score=result.score, passed=result.passed, reason=row["reason"], judge_calls=row["judge_calls"],
        prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
        cached_tokens=row["cached_tokens"], cost_usd=row["cost_usd"], attempts=attempt,
    )


def failure(work: TraceWork, error: Exception, attempt: int, flow_run_id: str | None,
            billed: Usage | None = None) -> tuple[dict, ScoreOutcome]:
    """A 'failed' row with its error; the calls its attempts made are billed: stored with it."""
    kind = error_kind(error)
    log.warning("%s for trace %s failed (%s): %s", work.metric, work.trace_id, kind, error)
    row = failure_row(work, error, kind, attempt, flow_run_id)
    if billed is not None and billed.calls:
        row.update(storable_result({
            **row, "prompt_tokens": billed.prompt_tokens, "completion_tokens": billed.completion_tokens,
            "cached_tokens": billed.cached_tokens,
            "judge_calls": billed.calls, "cost_usd": billed.cost_usd, "judge_model": billed.model,
        }))
    return row, ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status="failed",
        error=row["error"], error_kind=kind, attempts=attempt, judge_calls=row["judge_calls"],
        prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
        cached_tokens=row["cached_tokens"], cost_usd=row["cost_usd"],
    )


def deferred(work: TraceWork, attempts: int, billed: Usage | None = None, *, why: str
             ) -> tuple[None, ScoreOutcome]:
    """Not scored, left for the next run (no row: its claim is given back),
    ``why`` (the run's gate, judgeflow/run/gate.py, or its spend budget); what
    its attempts billed still counts (the summary, the budget)."""
    log.info("%s for trace %s left for the next run: %s", work.metric, work.trace_id, why)
    billed = billed or Usage()
    return None, ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status="deferred", attempts=attempts,
        judge_calls=billed.calls, prompt_tokens=billed.prompt_tokens, completion_tokens=billed.completion_tokens,
        cached_tokens=billed.cached_tokens, cost_usd=billed.cost_usd,
    )


def taken_over(work: TraceWork, billed: Usage | None = None, attempts: int = 0) -> tuple[None, ScoreOutcome]:
    """The pair's claim moved to another run before its judge was called, or
    between two of its judge calls: what the calls already sent billed still
    counts (the summary, the budget)."""
    billed = billed or Usage()
    return None, ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status="taken_over", attempts=attempts,
        judge_calls=billed.calls, prompt_tokens=billed.prompt_tokens, completion_tokens=billed.completion_tokens,
        cached_tokens=billed.cached_tokens, cost_usd=billed.cost_usd,
    )


def copied(work: TraceWork, source: dict, threshold: float, flow_run_id: str | None, digest: str
           ) -> tuple[dict, ScoreOutcome]:
    """A copy of an identical pair's result (judgeflow/run/reuse.py): no judge call."""
    row = reuse.copied_row(work, source, threshold=threshold, flow_run_id=flow_run_id, digest=digest)
    row["segment"] = work.segment  # this trace's own alert segment, not the source's
    row = storable_result(row)
    return row, ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status=row["status"], score=row["score"],
        passed=row["passed"], reason=row["reason"], cost_usd=0.0, reused=True,
    )


def as_stored(outcome: ScoreOutcome, stored: StoredPairs) -> ScoreOutcome:
    """The outcome as the database has it after the store answered."""
    pair = (outcome.trace_id, outcome.metric)
    if pair in stored.refused:
        return outcome.model_copy(update={
            "status": "failed", "error": stored.refused[pair], "error_kind": "unstorable", "score": None,
            "passed": None,
        })
    if pair in stored.kept:
        return outcome.model_copy(update={"error": f"{outcome.error} (re-score failed; previous score kept)"})
    if pair not in stored:
        return outcome.model_copy(update={"status": "superseded"})
    return outcome
