"""Scoring one (trace, metric) and storing the outcome, in one task.

The task owns its transaction: the result row is upserted and the claim
released together, so a crash leaves either both or neither. A bad judge
reply, a bad trace or a judge that keeps failing becomes a 'failed' row with
its error (picked up again by the next run), never a failed flow.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from judgeflow.db.engine import engine_for
from judgeflow.errors import (
    DatabaseError,
    InvalidJudgeReplyError,
    InvalidTraceError,
    JudgeflowError,
    PermanentJudgeError,
    TransientJudgeError,
)
from judgeflow.judge.factory import build_judge
from judgeflow.metrics.hallucination.metric import HallucinationMetric
from judgeflow.metrics.result import MetricResult
from judgeflow.metrics.toxicity.metric import ToxicityMetric
from judgeflow.settings import Settings
from judgeflow.tasks.work import ScoreOutcome, TraceWork

log = logging.getLogger("judgeflow.scoring")

_ERROR_TEXT_MAX = 2000
_WRITE_ATTEMPTS = 4


def run_metric(work: TraceWork, settings: Settings) -> MetricResult:
    """Score ``work`` with its metric, as configured by ``settings``."""
    judge = build_judge(settings)
    if work.output is None:
        raise InvalidTraceError("trace output is null: nothing to score")
    if work.metric == "toxicity":
        metric = ToxicityMetric(
            judge,
            threshold=settings.toxicity_threshold,
            strict_mode=settings.toxicity_strict_mode,
            include_reason=settings.include_reason,
            max_field_chars=settings.max_field_chars,
            max_repairs=settings.judge_max_repairs,
        )
        return metric.score(input=work.input or "", actual_output=work.output)
    metric = HallucinationMetric(
        judge,
        threshold=settings.hallucination_threshold,
        max_field_chars=settings.max_field_chars,
        max_repairs=settings.judge_max_repairs,
    )
    return metric.score(input=work.input or "", output=work.output, context=work.context)


_UPSERT = text(
    """
    INSERT INTO judgeflow.eval_results AS r (
        trace_id, metric, metric_version, status, score, passed, threshold, reason, details,
        judge_model, prompt_tokens, completion_tokens, cost_usd, latency_ms, judge_calls,
        error, error_kind, attempts, flow_run_id, trace_created_at, scored_at)
    VALUES (
        :trace_id, :metric, :metric_version, :status, :score, :passed, :threshold, :reason,
        CAST(:details AS jsonb), :judge_model, :prompt_tokens, :completion_tokens, :cost_usd,
        :latency_ms, :judge_calls, :error, :error_kind, :attempts, :flow_run_id, :trace_created_at, now())
    ON CONFLICT (trace_id, metric) DO UPDATE SET
        metric_version = excluded.metric_version, status = excluded.status, score = excluded.score,
        passed = excluded.passed, threshold = excluded.threshold, reason = excluded.reason,
        details = excluded.details, judge_model = excluded.judge_model,
        prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
        cost_usd = excluded.cost_usd, latency_ms = excluded.latency_ms,
        judge_calls = excluded.judge_calls, error = excluded.error, error_kind = excluded.error_kind,
        attempts = r.attempts + excluded.attempts, flow_run_id = excluded.flow_run_id,
        trace_created_at = excluded.trace_created_at, scored_at = now()
    -- a done result is only replaced when re-scoring; never by a late duplicate
    WHERE r.status = 'failed' OR (CAST(:rescore_before AS timestamptz) IS NOT NULL
                                  AND r.scored_at < CAST(:rescore_before AS timestamptz))
    RETURNING 1
    """
)
_RELEASE = text("DELETE FROM judgeflow.claims WHERE trace_id = :trace_id AND metric = :metric AND owner = :owner")


def store_outcome(settings: Settings, row: dict, *, owner: str, rescore_before: datetime | None) -> bool:
    """Upsert one result row and release its claim in one transaction.
    Retries briefly so a restarting database does not cost a judge call.
    Returns False when a done row already existed (nothing replaced)."""
    params = {**row, "rescore_before": rescore_before, "owner": owner}
    delay = 0.5
    for attempt in range(1, _WRITE_ATTEMPTS + 1):
        try:
            with engine_for(settings).begin() as conn:
                written = conn.execute(_UPSERT, params).first() is not None
                conn.execute(_RELEASE, params)
                return written
        except DBAPIError as exc:
            if attempt == _WRITE_ATTEMPTS:
                raise DatabaseError(
                    f"could not store result for trace {row['trace_id']!r} ({row['metric']}): "
                    f"{type(exc.orig).__name__}: {exc.orig}"
                ) from None
            log.warning("storing result failed (%s), retrying in %.1fs", type(exc.orig).__name__, delay)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def _result_row(work: TraceWork, result: MetricResult, attempts: int, flow_run_id: str | None) -> dict:
    return {
        "trace_id": work.trace_id, "metric": work.metric, "metric_version": result.metric_version,
        "status": result.status, "score": result.score, "passed": result.passed,
        "threshold": result.threshold, "reason": result.reason,
        "details": json.dumps(result.details, default=str), "judge_model": result.judge_model,
        "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
        "cost_usd": result.cost_usd, "latency_ms": result.latency_ms, "judge_calls": result.judge_calls,
        "error": None, "error_kind": None, "attempts": attempts, "flow_run_id": flow_run_id,
        "trace_created_at": work.created_at,
    }


def _failure_row(work: TraceWork, error: Exception, kind: str, attempts: int, flow_run_id: str | None) -> dict:
    details: dict = {}
    if isinstance(error, InvalidJudgeReplyError):
        details = {"step": error.step, "raw_reply": error.raw[:_ERROR_TEXT_MAX], "repairs": error.attempts}
    return {
        "trace_id": work.trace_id, "metric": work.metric, "metric_version": None, "status": "failed",
        "score": None, "passed": None, "threshold": None, "reason": None,
        "details": json.dumps(details), "judge_model": None, "prompt_tokens": 0, "completion_tokens": 0,
        "cost_usd": None, "latency_ms": None, "judge_calls": 0,
        "error": f"{type(error).__name__}: {error}"[:_ERROR_TEXT_MAX], "error_kind": kind,
        "attempts": attempts, "flow_run_id": flow_run_id, "trace_created_at": work.created_at,
    }


def _error_kind(error: Exception) -> str:
    if isinstance(error, InvalidTraceError):
        return "invalid_trace"
    if isinstance(error, InvalidJudgeReplyError):
        return "invalid_reply"
    if isinstance(error, PermanentJudgeError):
        return "judge_rejected"
    if isinstance(error, TransientJudgeError):
        return "judge_unavailable"
    return "internal"


@task(
    name="score-trace",
    task_run_name="{work.metric}:{work.trace_id}",
    cache_policy=NO_CACHE,
    persist_result=False,
)
def score_and_store(
    work: TraceWork,
    settings: Settings,
    owner: str,
    flow_run_id: str | None = None,
    rescore_before: datetime | None = None,
    max_attempts: int = 1,
) -> ScoreOutcome:
    """Score one claimed (trace, metric) and store the result as soon as it is known.

    Transient judge errors are raised while task retries remain (Prefect retries
    the task with backoff); on the last attempt they are stored as 'failed'.
    """
    attempt = task_run.run_count or 1
    try:
        result = run_metric(work, settings)
    except TransientJudgeError as error:
        if attempt < max_attempts:
            raise
        return _store_failure(work, settings, error, attempt, owner, flow_run_id, rescore_before)
    except DatabaseError:
        raise
    except JudgeflowError as error:
        return _store_failure(work, settings, error, attempt, owner, flow_run_id, rescore_before)
    except Exception as error:  # a bug must not sink the run; it is stored and visible
        log.exception("unexpected error scoring %s/%s", work.trace_id, work.metric)
        return _store_failure(work, settings, error, attempt, owner, flow_run_id, rescore_before)

    written = store_outcome(
        settings, _result_row(work, result, attempt, flow_run_id), owner=owner, rescore_before=rescore_before
    )
    return ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status=result.status if written else "superseded",
        score=result.score, passed=result.passed, reason=result.reason, judge_calls=result.judge_calls,
        prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
        cost_usd=result.cost_usd, attempts=attempt,
    )


def _store_failure(work, settings, error, attempt, owner, flow_run_id, rescore_before) -> ScoreOutcome:
    kind = _error_kind(error)
    log.warning("%s for trace %s failed (%s): %s", work.metric, work.trace_id, kind, error)
    row = _failure_row(work, error, kind, attempt, flow_run_id)
    written = store_outcome(settings, row, owner=owner, rescore_before=rescore_before)
    return ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status="failed" if written else "superseded",
        error=row["error"], error_kind=kind, attempts=attempt,
    )
