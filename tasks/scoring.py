"""Scoring claimed (trace, metric) pairs and storing the outcomes.

Two task shapes, chosen by the flow's ``fanout`` parameter:

- ``score-trace`` (fanout "pair"): one Prefect task run per pair,
  named ``<metric>:<trace id>``, retried by Prefect on transient judge errors.
  The task owns its transaction: the result row is upserted and the claim
  released together.
- ``score-batch`` (fanout "batch", the default): one task per claimed batch,
  named for its trace ids (``score-batch: tr-1 tr-2 ...``: the Prefect UI's search
  of a run's task runs finds a trace's batch), with a table artifact of one row per pair. Its pairs run
  as coroutines on the process's judge event loop (tasks/judge_loop.py; at most ``max_concurrency``
  at once across every batch in flight), each retried in-process on the same
  schedule (``JUDGEFLOW_TASK_RETRIES`` retries, ``JUDGEFLOW_TASK_RETRY_DELAY_S``
  doubling), and outcomes are written a few at a time within
  ``FLUSH_INTERVAL_S``, each write upserting rows and releasing their claims in
  one transaction. A crash loses at most the pairs in flight and the last
  fraction of a second of results (their claims die with the run, and the next
  run scores them again). Why it exists: every Prefect task run costs CPU in the
  scoring process and several times as much in the Prefect server, which holds
  a small machine to a few traces per second per core whatever the judge's
  speed (docs/benchmark.md has the figures).

Either way a bad judge reply, a bad trace or a judge that keeps failing
becomes a 'failed' row with its error (picked up again by the next run),
never a failed flow.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from datetime import datetime

from prefect import get_run_logger, task
from prefect.exceptions import MissingContextError
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

from judgeflow.budget import RunBudget
from judgeflow.db.engine import engine_for
from judgeflow.db.sources.identity import result_source
from judgeflow.db.storable import storable, storable_count, storable_float, storable_row
from judgeflow.errors import (
    DatabaseError,
    InvalidJudgeReplyError,
    InvalidTraceError,
    JudgeflowError,
    PermanentJudgeError,
    TransientJudgeError,
)
from judgeflow.judge.base import queue_ahead
from judgeflow.judge.factory import build_judge, build_started_judge
from judgeflow.metrics.hallucination.metric import HallucinationMetric
from judgeflow.metrics.result import MetricResult
from judgeflow.metrics.steps import Usage
from judgeflow.metrics.toxicity.metric import ToxicityMetric
from judgeflow.run_progress import stop_requested
from judgeflow.settings import Settings
from judgeflow.tasks.claims import claims_at_risk, still_owned
from judgeflow.tasks.judge_loop import judge_loop
from judgeflow.tasks import reuse
from judgeflow.tasks.work import ScoreOutcome, TraceWork

log = logging.getLogger("judgeflow.scoring")

_ERROR_TEXT_MAX = 2000
_WRITE_ATTEMPTS = 6  # 0.5 + 1 + 2 + 4 + 8 s: rides through a database restart
FLUSH_INTERVAL_S = 0.25  # a known result waits at most this long to be written
FLUSH_ROWS = 50  # ... or until this many are waiting
FRESH_CLAIM_S = 1.0  # a batch started this soon after its claim skips the ownership check


def build_metrics(settings: Settings) -> dict[str, ToxicityMetric | HallucinationMetric]:
    """The configured metrics, built once per batch (building one hashes its
    prompts and schemas for the metric version)."""
    judge = build_judge(settings)
    return {
        "toxicity": ToxicityMetric(
            judge,
            threshold=settings.toxicity_threshold,
            strict_mode=settings.toxicity_strict_mode,
            include_reason=settings.include_reason,
            max_field_chars=settings.max_field_chars,
            max_repairs=settings.judge_max_repairs,
            max_opinions=settings.max_opinions,
        ),
        "hallucination": HallucinationMetric(
            judge,
            threshold=settings.hallucination_threshold,
            max_field_chars=settings.max_field_chars,
            max_repairs=settings.judge_max_repairs,
        ),
    }


@task(name="start-judge", cache_policy=NO_CACHE, persist_result=False)
def start_judge(settings: Settings) -> str:
    """Build the run's judge and start its worker processes, if any, while the
    run checks the schema and claims its first batch: importing litellm takes
    seconds, in the run's process or in each judge worker. Never fails the run:
    a judge that cannot be built fails the pairs' tasks, which record why."""
    try:
        judge = build_started_judge(settings)  # `judgeflow score` may have started it: then it is that (cached) judge
    except Exception as error:  # reported by every pair it would have scored
        log.warning("the judge could not be started ahead of the run: %s", error)
        return "not started"
    return repr(judge)


_COLUMNS = (
    "trace_id text, metric text, metric_version text, status text, score float8, passed boolean, "
    "threshold float8, reason text, details jsonb, judge_model text, prompt_tokens bigint, "
    "completion_tokens bigint, cost_usd float8, latency_ms float8, judge_calls int, error text, "
    "error_kind text, attempts int, flow_run_id text, trace_created_at timestamptz, segment jsonb, content_hash text"
)
_NAMES = ", ".join(c.split()[0] for c in _COLUMNS.split(", "))
# a row built without a segment (none configured) stores '{}'
_SELECTED = _NAMES.replace("segment", "COALESCE(segment, '{}'::jsonb)")

# Many rows in one statement: the rows travel as one JSON array.
_UPSERT = text(
    f"""
    INSERT INTO judgeflow.eval_results AS r ({_NAMES}, failed_runs, scored_at, source)
    SELECT {_SELECTED}, CASE WHEN status = 'failed' THEN 1 ELSE 0 END, now(), :source
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x({_COLUMNS})
    ON CONFLICT (trace_id, metric) DO UPDATE SET
        metric_version = excluded.metric_version, status = excluded.status, score = excluded.score,
        passed = excluded.passed, threshold = excluded.threshold, reason = excluded.reason,
        details = excluded.details, judge_model = excluded.judge_model,
        prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
        cost_usd = excluded.cost_usd, latency_ms = excluded.latency_ms,
        judge_calls = excluded.judge_calls, error = excluded.error, error_kind = excluded.error_kind,
        attempts = r.attempts + excluded.attempts, flow_run_id = excluded.flow_run_id,
        trace_created_at = excluded.trace_created_at, segment = excluded.segment, content_hash = excluded.content_hash,
        scored_at = now(), source = excluded.source,
        failed_runs = r.failed_runs + excluded.failed_runs
    -- a done result is only replaced when re-scoring, and only by a new score:
    -- never by a late duplicate, never by a failed re-score (see _NOTE_FAILED_RESCORE)
    WHERE r.status = 'failed' OR (CAST(:rescore_before AS timestamptz) IS NOT NULL
                                  AND r.scored_at < CAST(:rescore_before AS timestamptz)
                                  AND excluded.status <> 'failed')
    RETURNING r.trace_id, r.metric
    """
)
# A re-score that failed keeps the score it was meant to replace; the attempt
# is noted on it, so the next --rescore tries again and people can see why.
_NOTE_FAILED_RESCORE = text(
    f"""
    UPDATE judgeflow.eval_results r SET details = r.details || jsonb_build_object(
        'failed_rescores', COALESCE((r.details ->> 'failed_rescores')::int, 0) + 1,
        'last_failed_rescore', jsonb_build_object(
            'at', now(), 'error', x.error, 'error_kind', x.error_kind, 'flow_run_id', x.flow_run_id))
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x({_COLUMNS})
    WHERE r.trace_id = x.trace_id AND r.metric = x.metric AND x.status = 'failed' AND r.status <> 'failed'
      AND CAST(:rescore_before AS timestamptz) IS NOT NULL AND r.scored_at < CAST(:rescore_before AS timestamptz)
    RETURNING r.trace_id, r.metric
    """
)
_RELEASE = text(
    """
    DELETE FROM judgeflow.claims c
    USING unnest(CAST(:trace_ids AS text[]), CAST(:metrics AS text[])) AS k(trace_id, metric)
    WHERE c.trace_id = k.trace_id AND c.metric = k.metric AND c.owner = :owner
    """
)
# The pairs whose claim ``owner`` still holds, locked until the write commits so
# no other run can take one over between this check and the upsert.
_OWNED = text(
    """
    SELECT c.trace_id, c.metric FROM judgeflow.claims c
    JOIN unnest(CAST(:trace_ids AS text[]), CAST(:metrics AS text[])) AS k(trace_id, metric)
      ON c.trace_id = k.trace_id AND c.metric = k.metric
    WHERE c.owner = :owner
    FOR UPDATE OF c
    """
)
_SUPERSEDED = text(
    """
    INSERT INTO judgeflow.superseded_results
        (trace_id, metric, status, score, judge_calls, cost_usd, flow_run_id, why, owner)
    SELECT trace_id, metric, status, score, judge_calls, cost_usd, flow_run_id, why, :owner
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x(
        trace_id text, metric text, status text, score float8, judge_calls int, cost_usd float8,
        flow_run_id text, why text)
    """
)
_IDLE_LIMIT = text("SET LOCAL idle_in_transaction_session_timeout = '30s'")
CLAIM_LOST = "the claim had moved to another run"
DONE_EXISTS = "a done result was already stored"


def _json_default(value):
    return value.isoformat() if isinstance(value, datetime) else str(value)


class StoredPairs(set):
    """The (trace, metric) pairs whose row was written. ``refused`` maps a pair
    whose row the database refused to why (a 'failed' row saying so was stored
    instead, when possible); ``kept`` holds pairs whose failed re-score left
    the previous score in place."""

    def __init__(self, pairs=(), *, refused: dict | None = None, kept: set | None = None):
        super().__init__(pairs)
        self.refused: dict[tuple[str, str], str] = dict(refused or {})
        self.kept: set[tuple[str, str]] = set(kept or ())

    def merge(self, other: "StoredPairs") -> None:
        self |= other
        self.refused.update(other.refused)
        self.kept |= other.kept


def _write(settings: Settings, rows: list[dict], owner: str, rescore_before: datetime | None) -> StoredPairs:
    keys = {"trace_ids": [r["trace_id"] for r in rows], "metrics": [r["metric"] for r in rows], "owner": owner}
    with engine_for(settings).begin() as conn:
        # A process frozen (SIGSTOP, a stalled VM) inside this transaction holds
        # the claims' row locks, and a run taking its pairs over would wait for
        # as long as it stays frozen: the server ends such a session instead
        # (this run then retries the write, and finds the claims gone).
        conn.execute(_IDLE_LIMIT)
        owned = {(t, m) for t, m in conn.execute(_OWNED, keys).all()}
        # only the claim's current owner writes: a run that lost the claim (it
        # was frozen past its lease, say) must not race the run that took it over
        mine = [r for r in rows if (r["trace_id"], r["metric"]) in owned]
        written: set[tuple[str, str]] = set()
        kept: set[tuple[str, str]] = set()
        if mine:
            params = {"rows": json.dumps(mine, default=_json_default), "rescore_before": rescore_before}
            written = {(t, m) for t, m in conn.execute(_UPSERT, {**params, "source": result_source(settings)})}
            if rescore_before is not None:
                kept = {(t, m) for t, m in conn.execute(_NOTE_FAILED_RESCORE, params)}
        late = [
            {
                "trace_id": r["trace_id"], "metric": r["metric"], "status": r["status"], "score": r["score"],
                "judge_calls": r["judge_calls"], "cost_usd": r["cost_usd"], "flow_run_id": r["flow_run_id"],
                "why": DONE_EXISTS if (r["trace_id"], r["metric"]) in owned else CLAIM_LOST,
            }
            for r in rows
            if (r["trace_id"], r["metric"]) not in written and (r["trace_id"], r["metric"]) not in kept
        ]
        if late:
            conn.execute(_SUPERSEDED, {"rows": json.dumps(late, default=_json_default), "owner": owner})
        if owned:
            conn.execute(_RELEASE, keys)
    for row in late:
        log.warning("%s for trace %s superseded: %s; the stored result stands", row["metric"], row["trace_id"],
                    row["why"])
    return StoredPairs(written, kept=kept)


def store_outcomes(
    settings: Settings, rows: list[dict], *, owner: str, rescore_before: datetime | None,
    _fallback: bool = False,
) -> StoredPairs:
    """Upsert result rows and release their claims in one transaction; returns
    the (trace, metric) pairs written. A pair missing was superseded: its claim
    had moved to another run, or a done row existed already; it is recorded in
    ``judgeflow.superseded_results`` instead.
    Retries with backoff so a restarting database does not cost judge calls.
    A row the database refuses (not a connection problem) is isolated by
    writing the rows one at a time, so it cannot take the others down with it;
    it is then stored as a 'failed' row saying why (see :class:`StoredPairs`),
    never raised: its task and its run go on."""
    if not rows:
        return StoredPairs()
    delay = 0.5
    for attempt in range(1, _WRITE_ATTEMPTS + 1):
        try:
            return _write(settings, rows, owner, rescore_before)
        except OperationalError as exc:
            if attempt == _WRITE_ATTEMPTS:
                raise DatabaseError(
                    f"could not store {len(rows)} result(s) (first: trace {rows[0]['trace_id']!r}, "
                    f"{rows[0]['metric']}): {type(exc.orig).__name__}: {exc.orig}"
                ) from None
            log.warning("storing results failed (%s), retrying in %.1fs", type(exc.orig).__name__, delay)
            time.sleep(delay)
            delay *= 2
        except DBAPIError as exc:
            if len(rows) == 1:
                return _store_refused(settings, rows[0], exc, owner=owner, rescore_before=rescore_before,
                                      fallback=_fallback)
            written = StoredPairs()
            for row in rows:
                written.merge(store_outcomes(settings, [row], owner=owner, rescore_before=rescore_before))
            return written
    raise AssertionError("unreachable")


def _store_refused(
    settings: Settings, row: dict, exc: DBAPIError, *, owner: str, rescore_before: datetime | None, fallback: bool
) -> StoredPairs:
    """The database refused ``row`` (a constraint, a value it cannot hold):
    store a 'failed' row that says so instead. If even that is refused, the
    pair is left unwritten (its claim expires; the next run tries again)."""
    pair = (row["trace_id"], row["metric"])
    why = f"could not store the result: {type(exc.orig).__name__}: {exc.orig}"
    why = storable(why[:_ERROR_TEXT_MAX])[0]
    log.error("%s for trace %s: %s", row["metric"], row["trace_id"], why)
    if fallback:
        return StoredPairs(refused={pair: why})
    failure = {
        **row, "metric_version": row.get("metric_version"), "status": "failed", "score": None, "passed": None,
        "reason": None, "details": {"unstorable": {"status": row.get("status"), "error": why}},
        "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": None, "latency_ms": None,
        "error": why, "error_kind": "unstorable",
    }
    stored = store_outcomes(settings, [failure], owner=owner, rescore_before=rescore_before, _fallback=True)
    stored.refused.setdefault(pair, why)
    return stored


def store_outcome(settings: Settings, row: dict, *, owner: str, rescore_before: datetime | None) -> StoredPairs:
    """One row (see :func:`store_outcomes`); empty when a done row already existed."""
    return store_outcomes(settings, [row], owner=owner, rescore_before=rescore_before)


def settle_outcome(outcome: ScoreOutcome, stored: StoredPairs) -> ScoreOutcome:
    """The outcome as the database has it after :func:`store_outcomes`."""
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


_TEXT_FIELDS = ("reason", "error", "judge_model", "metric_version")
_JSON_FIELDS = ("details",)


def _storable(row: dict) -> dict:
    row = storable_row(row, text_fields=_TEXT_FIELDS, json_fields=_JSON_FIELDS)
    row["prompt_tokens"] = storable_count(row.get("prompt_tokens"))
    row["completion_tokens"] = storable_count(row.get("completion_tokens"))
    row["judge_calls"] = min(storable_count(row.get("judge_calls")), 2**31 - 1)
    row["cost_usd"] = storable_float(row.get("cost_usd"))
    row["latency_ms"] = storable_float(row.get("latency_ms"))
    return row


def _result_row(work: TraceWork, result: MetricResult, attempts: int, flow_run_id: str | None) -> dict:
    return _storable({
        "trace_id": work.trace_id, "metric": work.metric, "metric_version": result.metric_version,
        "status": result.status, "score": result.score, "passed": result.passed,
        "threshold": result.threshold, "reason": result.reason,
        "details": result.details, "judge_model": result.judge_model,
        "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
        "cost_usd": result.cost_usd, "latency_ms": result.latency_ms, "judge_calls": result.judge_calls,
        "error": None, "error_kind": None, "attempts": attempts, "flow_run_id": flow_run_id,
        "trace_created_at": work.created_at, "segment": work.segment, "content_hash": None,
    })


def _failure_row(work: TraceWork, error: Exception, kind: str, attempts: int, flow_run_id: str | None) -> dict:
    details: dict = {}
    if isinstance(error, InvalidJudgeReplyError):
        details = {"step": error.step, "raw_reply": error.raw[:_ERROR_TEXT_MAX], "repairs": error.attempts}
    return _storable({
        "trace_id": work.trace_id, "metric": work.metric, "metric_version": None, "status": "failed",
        "score": None, "passed": None, "threshold": None, "reason": None,
        "details": details, "judge_model": None, "prompt_tokens": 0, "completion_tokens": 0,
        "cost_usd": None, "latency_ms": None, "judge_calls": 0,
        "error": f"{type(error).__name__}: {error}"[:_ERROR_TEXT_MAX], "error_kind": kind,
        "attempts": attempts, "flow_run_id": flow_run_id, "trace_created_at": work.created_at,
        "segment": work.segment, "content_hash": None,
    })


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


async def _ready(result: MetricResult) -> MetricResult:
    return result


def _metric_call(work: TraceWork, metrics: dict, *, asynchronous: bool):
    """The metric's score() (or ascore() coroutine) for ``work``; a trace its
    source said not to judge (``skip_reason``) is 'skipped' with that reason,
    without a judge call; one the source could not read (``read_error``) fails."""
    if work.read_error is not None:
        raise InvalidTraceError(f"the trace could not be read from the source: {work.read_error}")
    if work.skip_reason is not None:
        metric = metrics[work.metric]
        result = MetricResult(
            name=work.metric, status="skipped", threshold=metric.effective_threshold,
            reason=work.skip_reason, details={"skipped_by_source": True}, metric_version=metric.metric_version,
        )
        return _ready(result) if asynchronous else result
    if work.output is None:
        raise InvalidTraceError("trace output is null: nothing to score")
    metric = metrics[work.metric]
    score = metric.ascore if asynchronous else metric.score
    if work.metric == "toxicity":
        return score(input=work.input or "", actual_output=work.output)
    return score(input=work.input or "", output=work.output, context=work.context)


async def score_pair(
    work: TraceWork,
    settings: Settings,
    metrics: dict,
    *,
    flow_run_id: str | None,
    retry_delays: list[float],
    deadline: float | None = None,
    digest: str | None = None,
    run: str | None = None,
    slots: int | None = None,
    priority: tuple[int, ...] | int = 0,
    claimed_at: float | None = None,
    budget: RunBudget | None = None,
) -> tuple[dict | None, ScoreOutcome]:
    """:func:`judge_pair`, once per content ``digest`` in run ``run``: an
    identical pair already being judged is waited for and copied (tasks/reuse.py).
    With ``slots``, the judging takes one of that many slots of the judge loop
    (lower ``priority`` first); waiting for a twin takes none. A pair whose
    run lost its claims since ``claimed_at`` (its lock lapsed, then came back:
    tasks/claims.py) is judged only if its claim is still the run's."""

    async def judge_if_still_owned(*args, **kwargs) -> tuple[dict | None, ScoreOutcome]:
        if run is not None and claims_at_risk(run, claimed_at):
            if (work.trace_id, work.metric) not in await asyncio.to_thread(still_owned, settings, run, [work]):
                log.warning("%s for trace %s: the run's claim lapsed and moved to another run; not judged here",
                            work.metric, work.trace_id)
                return None, ScoreOutcome(trace_id=work.trace_id, metric=work.metric, status="taken_over",
                                          attempts=0)
        return await judge_pair(*args, **kwargs)

    async def judge() -> tuple[dict | None, ScoreOutcome]:
        kwargs = dict(flow_run_id=flow_run_id, retry_delays=retry_delays, deadline=deadline, digest=digest,
                      budget=budget)
        if slots is None:
            return await judge_if_still_owned(work, settings, metrics, **kwargs)
        return await judge_loop().bounded(
            slots, judge_if_still_owned, work, settings, metrics, priority=priority, **kwargs
        )

    if digest is None or run is None:
        return await judge()
    leader, future = reuse.in_flight.lead_or_follow(run, digest)
    if not leader:
        source = await asyncio.wrap_future(future)
        if source is not None:
            return _copied(work, source, metrics, flow_run_id, digest)
        return await judge()
    row = None
    try:
        row, outcome = await judge()
        return row, outcome
    finally:
        reuse.in_flight.settle(run, digest, future, None if row is None else reuse.reusable(row))


def _copied(work: TraceWork, source: dict, metrics: dict, flow_run_id: str | None, digest: str
            ) -> tuple[dict, ScoreOutcome]:
    row = reuse.copied_row(work, source, threshold=metrics[work.metric].effective_threshold,
                           flow_run_id=flow_run_id, digest=digest)
    row["segment"] = work.segment  # this trace's own alert segment, not the source's
    row = _storable(row)
    return row, ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status=row["status"], score=row["score"],
        passed=row["passed"], reason=row["reason"], cost_usd=0.0, reused=True,
    )


def _digests(items: list[TraceWork], settings: Settings, metrics: dict) -> dict[tuple[str, str], str]:
    """Content hashes of the pairs that may reuse a result (none when reuse is off)."""
    if not settings.reuse_identical:
        return {}
    versions = {name: metric.metric_version for name, metric in metrics.items()}
    out = {}
    for work in items:
        if work.skip_reason is not None:  # not judged: nothing to copy from or to
            continue
        digest = reuse.content_hash(work, settings, versions[work.metric])
        if digest is not None:
            out[(work.trace_id, work.metric)] = digest
    return out


async def judge_pair(
    work: TraceWork,
    settings: Settings,
    metrics: dict,
    *,
    flow_run_id: str | None,
    retry_delays: list[float],
    deadline: float | None = None,
    digest: str | None = None,
    budget: RunBudget | None = None,
) -> tuple[dict | None, ScoreOutcome]:
    """Score one claimed (trace, metric): the row to store and the outcome to
    report (its status assuming the row is written). Never raises: transient
    judge errors are retried after ``retry_delays`` and stored as 'failed'
    once they run out; every other error is stored as 'failed' at once.
    Past ``deadline`` (the run's time budget, ``time.time()``) no attempt is
    started: the row is None and the pair is left for the next run; likewise
    when the run's spend ``budget`` has no room left for a retry.

    Every attempt's judge calls count: a retry re-runs the whole metric, and
    what the failed attempts billed is added to the stored tokens, calls and
    ``cost_usd`` (and charged to ``budget`` before the retry starts)."""
    max_attempts = len(retry_delays) + 1
    billed = Usage()  # what the attempts that failed have billed
    for attempt in range(1, max_attempts + 1):
        if past(deadline):
            return None, _deferred(work, attempt - 1, billed)
        try:
            result = await _metric_call(work, metrics, asynchronous=True)
        except TransientJudgeError as error:
            _count_billed(billed, error)
            if attempt < max_attempts:
                if not _retry_fits(budget, work, billed):
                    return None, _deferred(work, attempt, billed, why="the run's spend budget has no room for a retry")
                log.info("%s for trace %s: %s; retrying in %.1fs", work.metric, work.trace_id, error,
                         retry_delays[attempt - 1])
                await asyncio.sleep(retry_delays[attempt - 1])
                continue
            return _failure(work, error, attempt, flow_run_id, billed)
        except JudgeflowError as error:
            _count_billed(billed, error)
            return _failure(work, error, attempt, flow_run_id, billed)
        except Exception as error:  # a bug must not sink the run; it is stored and visible
            log.exception("unexpected error scoring %s/%s", work.trace_id, work.metric)
            return _failure(work, error, attempt, flow_run_id, billed)
        return _success(work, _with_billed(result, billed), attempt, flow_run_id, digest)
    raise AssertionError("unreachable")


def _count_billed(billed: Usage, error: Exception) -> None:
    """Add what the failed attempt billed before ``error`` (the metric attaches it)."""
    if isinstance(getattr(error, "billed", None), Usage):
        billed.merge(error.billed)


def _retry_fits(budget: RunBudget | None, work: TraceWork, billed: Usage) -> bool:
    """Charge what the pair's failed attempts billed to the run's budget; whether a retry still fits."""
    return budget is None or budget.charge_retry(work, billed.cost_usd or 0.0, billed.calls)


def _with_billed(result: MetricResult, billed: Usage) -> MetricResult:
    """The result with the earlier, failed attempts' calls added to its own."""
    if not billed.calls:
        return result
    cost = None if result.cost_usd is None and billed.cost_usd is None else (
        (result.cost_usd or 0.0) + (billed.cost_usd or 0.0)
    )
    return result.model_copy(update={
        "prompt_tokens": result.prompt_tokens + billed.prompt_tokens,
        "completion_tokens": result.completion_tokens + billed.completion_tokens,
        "judge_calls": result.judge_calls + billed.calls,
        "cost_usd": cost,
    })


def past(deadline: float | None) -> bool:
    """The run's time budget is spent, or it was asked to stop: start no attempt."""
    return (deadline is not None and time.time() >= deadline) or stop_requested()


def _deferred(
    work: TraceWork, attempts: int, billed: Usage | None = None, *, why: str | None = None
) -> ScoreOutcome:
    """Not scored, left for the next run; what its attempts billed still counts (no row: the summary, the budget)."""
    if why is None:
        why = "the run was stopped" if stop_requested() else "the run's time budget is spent"
    log.info("%s for trace %s left for the next run: %s", work.metric, work.trace_id, why)
    billed = billed or Usage()
    return ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status="deferred", attempts=attempts,
        judge_calls=billed.calls, prompt_tokens=billed.prompt_tokens, completion_tokens=billed.completion_tokens,
        cost_usd=billed.cost_usd,
    )


def release_pairs(settings: Settings, pairs: list[tuple[str, str]], owner: str) -> None:
    """Give back claims on pairs this run will not score after all."""
    if pairs:
        with engine_for(settings).begin() as conn:
            conn.execute(_RELEASE, {"trace_ids": [t for t, _ in pairs], "metrics": [m for _, m in pairs],
                                    "owner": owner})


def _success(work: TraceWork, result: MetricResult, attempt: int, flow_run_id: str | None,
             digest: str | None = None) -> tuple[dict, ScoreOutcome]:
    row = _result_row(work, result, attempt, flow_run_id)
    row["content_hash"] = digest
    return row, ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status=result.status,
        score=result.score, passed=result.passed, reason=row["reason"], judge_calls=row["judge_calls"],
        prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
        cost_usd=row["cost_usd"], attempts=attempt,
    )


def _failure(work: TraceWork, error: Exception, attempt: int, flow_run_id: str | None,
             billed: Usage | None = None) -> tuple[dict, ScoreOutcome]:
    kind = _error_kind(error)
    log.warning("%s for trace %s failed (%s): %s", work.metric, work.trace_id, kind, error)
    row = _failure_row(work, error, kind, attempt, flow_run_id)
    if billed is not None and billed.calls:  # the calls its attempts made are billed: stored with it
        row.update(_storable({**row, "prompt_tokens": billed.prompt_tokens, "completion_tokens": billed.completion_tokens,
                              "judge_calls": billed.calls, "cost_usd": billed.cost_usd,
                              "judge_model": billed.model}))
    return row, ScoreOutcome(
        trace_id=work.trace_id, metric=work.metric, status="failed",
        error=row["error"], error_kind=kind, attempts=attempt, judge_calls=row["judge_calls"],
        prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"], cost_usd=row["cost_usd"],
    )


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
    deadline: float | None = None,
    budget: RunBudget | None = None,
) -> ScoreOutcome:
    """Score one claimed (trace, metric) and store the result as soon as it is
    known (fanout "pair": one task run per pair, findable by name in the UI).
    What earlier attempts (task runs retried by Prefect) billed is carried to
    the last one and counted as :func:`judge_pair` counts it.

    Transient judge errors are raised while task retries remain (Prefect retries
    the task with backoff); on the last attempt they are stored as 'failed'.
    Past ``deadline`` (the run's time budget) no attempt is started and no
    retry asked for: the claim is given back for the next run."""
    attempt = task_run.run_count or 1
    if past(deadline):
        release_pairs(settings, [(work.trace_id, work.metric)], owner)
        return _deferred(work, attempt - 1, _earlier_attempts.take(owner, work))
    if not still_owned(settings, owner, [work]):
        log.warning("%s for trace %s: another run took the claim over; not judged here", work.metric, work.trace_id)
        billed = _earlier_attempts.take(owner, work)
        return ScoreOutcome(trace_id=work.trace_id, metric=work.metric, status="taken_over", attempts=attempt - 1,
                            judge_calls=billed.calls, cost_usd=billed.cost_usd)
    metrics = build_metrics(settings)
    digest = _digests([work], settings, metrics).get((work.trace_id, work.metric))
    leader, future = (True, None) if digest is None else reuse.in_flight.lead_or_follow(owner, digest)
    if not leader:
        source = future.result()  # the identical pair being judged now by another task of this run
        if source is not None:
            return _store_copy(work, source, metrics, settings, owner, flow_run_id, rescore_before, digest)
    source = None
    try:
        if leader and digest is not None:
            source = reuse.find_done(settings, [digest], rescore_before=rescore_before).get(digest)
            if source is not None:
                return _store_copy(work, source, metrics, settings, owner, flow_run_id, rescore_before, digest)
        row, outcome = _judge_and_store(work, metrics, settings, owner, flow_run_id, rescore_before, max_attempts,
                                        attempt, digest, deadline, budget)
        source = None if row is None else reuse.reusable(row)
        return outcome
    finally:
        if leader and future is not None:  # never leaves a twin waiting, whatever happened here
            reuse.in_flight.settle(owner, digest, future, source)


def _store_copy(work, source, metrics, settings, owner, flow_run_id, rescore_before, digest) -> ScoreOutcome:
    row, outcome = _copied(work, source, metrics, flow_run_id, digest)
    return settle_outcome(outcome, store_outcome(settings, row, owner=owner, rescore_before=rescore_before))


def _judge_and_store(work, metrics, settings, owner, flow_run_id, rescore_before, max_attempts, attempt, digest,
                     deadline, budget=None) -> tuple[dict | None, ScoreOutcome]:
    billed = _earlier_attempts.take(owner, work)
    try:
        result = _metric_call(work, metrics, asynchronous=False)
        row, outcome = _success(work, _with_billed(result, billed), attempt, flow_run_id, digest)
    except TransientJudgeError as error:
        _count_billed(billed, error)
        if attempt < max_attempts and not past(deadline):
            if _retry_fits(budget, work, billed):
                _earlier_attempts.keep(owner, work, billed)
                raise
            release_pairs(settings, [(work.trace_id, work.metric)], owner)
            return None, _deferred(work, attempt, billed, why="the run's spend budget has no room for a retry")
        if attempt < max_attempts:  # a retry is due but the budget is spent: the next run tries again
            release_pairs(settings, [(work.trace_id, work.metric)], owner)
            return None, _deferred(work, attempt, billed)
        row, outcome = _failure(work, error, attempt, flow_run_id, billed)
    except JudgeflowError as error:
        _count_billed(billed, error)
        row, outcome = _failure(work, error, attempt, flow_run_id, billed)
    except Exception as error:  # a bug must not sink the run; it is stored and visible
        log.exception("unexpected error scoring %s/%s", work.trace_id, work.metric)
        row, outcome = _failure(work, error, attempt, flow_run_id, billed)
    return row, settle_outcome(outcome, store_outcome(settings, row, owner=owner, rescore_before=rescore_before))


class _EarlierAttempts:
    """What a pair's failed task runs billed, kept in-process until Prefect's retry
    of the same task (same process, same run) takes it: the exception that asks
    for the retry cannot carry it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._billed: dict[tuple[str, str, str], Usage] = {}

    def keep(self, owner: str, work: TraceWork, billed: Usage) -> None:
        with self._lock:
            self._billed[(owner, work.trace_id, work.metric)] = billed

    def take(self, owner: str, work: TraceWork) -> Usage:
        with self._lock:
            return self._billed.pop((owner, work.trace_id, work.metric), None) or Usage()


_earlier_attempts = _EarlierAttempts()


# longer names are cut there: a batch of 100 pairs holds at most 100 ids
_BATCH_NAME_MAX_CHARS = 20_000


def batch_run_name() -> str:
    """``score-batch: <trace id> <trace id> ...``: the run page's Task Runs tab
    searches task-run names (a substring match), so a trace id typed there
    finds the batch that scored it, whose artifact has the trace's rows."""
    items = task_run.parameters.get("items") or []
    name = "score-batch: " + " ".join(dict.fromkeys(w.trace_id for w in items))
    return name[:_BATCH_NAME_MAX_CHARS]


@task(name="score-batch", task_run_name=batch_run_name, cache_policy=NO_CACHE, persist_result=False)
def score_batch(
    items: list[TraceWork],
    settings: Settings,
    owner: str,
    flow_run_id: str | None = None,
    rescore_before: datetime | None = None,
    retry_delays: list[float] | None = None,
    deadline: float | None = None,
    claimed_at: float | None = None,
    budget: RunBudget | None = None,
) -> list[ScoreOutcome]:
    """Score a claimed batch of (trace, metric) pairs and store each result as
    soon as it is known (within ``FLUSH_INTERVAL_S``); see the module doc.
    ``claimed_at`` (``time.time()``): when the batch was claimed."""
    # A run loses a claim once its lease runs out (it was frozen) or its lock's
    # connection dropped. A batch that starts right after its claim is not
    # checked: that would delay the run's first judge call by a database round
    # trip per batch, a claim lost within a second is as good as never, and the
    # write checks ownership again in any case.
    fresh = (claimed_at is not None and 0 <= time.time() - claimed_at < FRESH_CLAIM_S
             and not claims_at_risk(owner, claimed_at))
    owned = {(w.trace_id, w.metric) for w in items} if fresh else still_owned(settings, owner, items)

    lost = [w for w in items if (w.trace_id, w.metric) not in owned]
    if lost:
        log.warning("%d pair(s) of the batch were taken over by another run; not judged here", len(lost))
        items = [w for w in items if (w.trace_id, w.metric) in owned]
    # the trace ids are the task run's name (batch_run_name); the task run's own
    # logger: INFO reaches the UI whatever level the judgeflow logger has
    try:
        batch_log = get_run_logger()
    except MissingContextError:  # called as a plain function (tests)
        batch_log = log
    batch_log.info("scoring %d pair(s) of %d trace(s)", len(items), len({w.trace_id for w in items}))
    metrics = build_metrics(settings)
    loop = judge_loop()
    order = loop.next_batch()
    delays = list(retry_delays or [])
    digests = _digests(items, settings, metrics)
    stored = reuse.find_done(settings, list(digests.values()), rescore_before=rescore_before)
    copies: list[tuple[dict, ScoreOutcome]] = []
    pending: set[Future] = set()
    # the longest chains of judge calls first across the run's batches, then older
    # batches first (tasks/judge_loop.py): the run ends on single calls
    def longest_first(work: TraceWork) -> int:
        return -metrics[work.metric].judge_rounds

    # pairs admitted at once: the judge's bound plus the calls it can hold prepared
    admitted = settings.max_concurrency + queue_ahead(build_judge(settings))

    for work in sorted(items, key=longest_first):
        digest = digests.get((work.trace_id, work.metric))
        if digest in stored:  # judged before: copied, no judge call
            copies.append(_copied(work, stored[digest], metrics, flow_run_id, digest))
            continue
        pending.add(loop.submit(score_pair, work, settings, metrics, flow_run_id=flow_run_id,
                                retry_delays=delays, deadline=deadline, digest=digest, run=owner, budget=budget,
                                slots=admitted, priority=(longest_first(work), order), claimed_at=claimed_at))

    outcomes: list[ScoreOutcome] = [
        ScoreOutcome(trace_id=w.trace_id, metric=w.metric, status="taken_over", attempts=0) for w in lost
    ]
    buffered: list[tuple[dict, ScoreOutcome]] = copies
    oldest = time.monotonic()  # time.monotonic() the oldest buffered result arrived

    def flush() -> None:
        rows = [row for row, _ in buffered if row is not None]
        written = store_outcomes(settings, rows, owner=owner, rescore_before=rescore_before)
        release_pairs(settings, [(o.trace_id, o.metric) for row, o in buffered if row is None], owner)
        for row, outcome in buffered:
            outcomes.append(outcome if row is None else settle_outcome(outcome, written))
        buffered.clear()

    try:
        if buffered and not pending:
            flush()
        while pending:
            timeout = None if not buffered else max(0.0, oldest + FLUSH_INTERVAL_S - time.monotonic())
            done, pending = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
            if done and not buffered:
                oldest = time.monotonic()
            buffered.extend(future.result() for future in done)
            if buffered and (
                not pending or len(buffered) >= FLUSH_ROWS or time.monotonic() - oldest >= FLUSH_INTERVAL_S
            ):
                flush()
    finally:
        for future in pending:  # the batch failed (its writes): do not start what is still queued
            future.cancel()
    _publish_batch_outcomes(outcomes)
    return outcomes


def _publish_batch_outcomes(outcomes: list[ScoreOutcome]) -> None:
    """A table artifact on the batch's task run: one row per (trace, metric),
    so the UI shows what happened to each trace without a task run per pair."""
    from prefect.artifacts import create_table_artifact
    from prefect.context import TaskRunContext

    if TaskRunContext.get() is None:  # called as a plain function (tests): no task run to attach to
        return
    rows = [
        {"trace_id": o.trace_id, "metric": o.metric, "status": o.status,
         "score": "" if o.score is None else round(o.score, 4), "attempts": o.attempts,
         "error": (o.error or "")[:200]}
        for o in sorted(outcomes, key=lambda o: (o.trace_id, o.metric))  # a trace's rows together
    ]
    try:
        create_table_artifact(rows, description=f"{len(rows)} (trace, metric) pair(s) of this batch")
    except Exception as error:  # the results are stored; the UI row is a convenience
        log.warning("could not publish the batch's artifact: %s", error)
