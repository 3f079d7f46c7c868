"""Scoring claimed (trace, metric) pairs: the ``score-batch`` task.

One task per claimed batch, named for its trace ids (``score-batch: tr-1 tr-2
...``: the Prefect UI's search of a run's task runs finds a trace's batch),
with a table artifact of one row per pair. Its pairs run as coroutines on the
process's judge event loop (judgeflow/judge/judge_loop.py), all at once: their judge
calls wait for the judge's slots (judgeflow/judge/wire_slots.py), the
pair with the longest chain of judge calls first, then the oldest batch's,
then the pair started first, so the run ends on single calls. Each pair
gets a gate made from the run's policy (judgeflow/run/policy.py,
judgeflow/run/gate.py) and a view of the judge its calls carry it through
(:class:`~judgeflow.judge.base.BoundJudge`): whether the pair may start is
asked as its first call is sent, and whether the pair is still the run's
before every attempt. A pair whose metric failed on a transient judge error
(after the judge's own attempts) is run again when the policy says so
(:meth:`~judgeflow.run.policy.RunPolicy.resend`, the pair level). Outcomes are
written a few at a time within ``FLUSH_INTERVAL_S`` through the results store
(judgeflow/db/results_store.py), each write upserting rows and releasing their
claims in one transaction. A crash loses at most the pairs in flight and the
last fraction of a second of results (their claims die with the run, and the
next run scores them again).

A bad judge reply, a bad trace or a judge that keeps failing becomes a
'failed' row with its error (picked up again by the next run), never a
failed flow. Every attempt a pair's calls sent is counted in its row's
``cost_usd`` and ``judge_calls`` and charged to the run's budget as the pair
ends (judgeflow/judge/spend.py, judgeflow/run/budget.py); a pair's first attempt
is sent only while the budget has room, the time budget lasts and no stop
was asked (judgeflow/run/gate.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from datetime import datetime

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import MissingContextError
from prefect.runtime import task_run

from judgeflow.db.results_store import release_pairs, store_outcomes
from judgeflow.errors import CallWithheld, InvalidTraceError, JudgeflowError, TransientJudgeError
from judgeflow.judge.base import BoundJudge, Judge, Usage
from judgeflow.run.entry import current_entry
from judgeflow.config.judge_models import own_judge_model
from judgeflow.judge.factory import build_judge, judge_config
from judgeflow.judge.retry import GiveUp, RetryPolicy
from judgeflow.judge.send_gate import Call
from judgeflow.metrics.registry import BuildOptions, ScoringMetric, registered
from judgeflow.metrics.result import MetricResult
from judgeflow.config.settings import Settings
from judgeflow.run import outcomes, reuse
from judgeflow.judge.judge_loop import judge_loop
from judgeflow.run.gate import TAKEN_OVER, PairGate
from judgeflow.run.policy import RunPolicy
from judgeflow.model import ScoreOutcome, TraceWork

log = logging.getLogger("judgeflow.scoring")

FLUSH_INTERVAL_S = 0.25  # a known result waits at most this long to be written
FLUSH_ROWS = 50  # ... or until this many are waiting
# longer names are cut there: a batch of 100 pairs holds at most 100 ids
_BATCH_NAME_MAX_CHARS = 20_000

Metrics = dict[str, ScoringMetric]
Scored = tuple[dict | None, ScoreOutcome]


def build_metrics(settings: Settings, judge: Judge) -> Metrics:
    """Every registered metric over ``judge`` (asking the metric's own judge
    model, if it has one) with its own settings, built once per batch (building
    one hashes its prompts and schemas for the metric version); a pair may hand
    its own judge to ``ascore(..., judge=...)``."""
    options = BuildOptions(include_reason=settings.include_reason, max_field_chars=settings.max_field_chars,
                           max_repairs=RetryPolicy.from_settings(settings).repairs,
                           session_max_chars=settings.session_max_chars)
    return {name: spec.build(BoundJudge(judge, None, own_judge_model(settings, name)),
                             settings.metric(name), options)
            for name, spec in registered().items()}


# retries=0: it never fails (None when the judge cannot be built; each batch then builds its own)
@task(name="start-judge", cache_policy=NO_CACHE, persist_result=False, retries=0)
def start_judge(settings: Settings) -> Judge | None:
    """The run's judge: the one its entry point started early
    (:func:`judgeflow.run.entry.current_entry`), else one built and started now,
    while the run checks the schema and claims its first batch (importing
    litellm takes seconds, in the run's process or in each judge worker).
    Never fails the run: None when the judge cannot be built; then each
    batch builds its own, and its pairs record why that failed."""
    entry = current_entry()
    if entry is not None and entry.judge is not None:
        return entry.judge
    try:
        judge = build_judge(judge_config(settings))
        judge.start()
    except Exception as error:  # reported by every pair it would have scored
        log.warning("the judge could not be started ahead of the run: %s", error)
        return None
    return judge


def close_judge(judge: Judge | None) -> None:
    """The run is over: close the judge :func:`start_judge` built (its worker
    processes end), not the one its entry point owns."""
    entry = current_entry()
    if judge is not None and (entry is None or entry.judge is not judge):
        judge.close()


async def _ready(result: MetricResult) -> MetricResult:
    return result


def _metric_call(work: TraceWork, metrics: Metrics, judge: Judge):
    """The metric's ascore() coroutine for ``work``; a trace its source said
    not to judge (``skip_reason``) is 'skipped' with that reason, without a
    judge call; one the source could not read (``read_error``) fails."""
    if work.read_error is not None:
        raise InvalidTraceError(f"the trace could not be read from the source: {work.read_error}")
    metric = metrics[work.metric]
    if work.skip_reason is not None:
        return _ready(MetricResult(
            name=work.metric, status="skipped", threshold=metric.effective_threshold,
            reason=work.skip_reason, details={"skipped_by_source": True}, metric_version=metric.metric_version,
        ))
    if work.turns is not None:  # a session: its conversation is the context (judgeflow/metrics/conversation.py)
        if not work.context:
            raise InvalidTraceError("the session has no turns the source still shows: nothing to score")
        return metric.ascore("", "", work.context, judge=judge)
    if work.output is None:
        raise InvalidTraceError("trace output is null: nothing to score")
    return metric.ascore(work.input or "", work.output, work.context, judge=judge)


async def judge_pair(
    work: TraceWork,
    settings: Settings,
    metrics: Metrics,
    *,
    judge: Judge,
    gate: PairGate,
    flow_run_id: str | None,
    digest: str | None = None,
) -> Scored:
    """Score one claimed (trace, metric): the row to store and the outcome to
    report (its status assuming the row is written). Never raises: the one
    loop over the pair's runs (the pair level, judgeflow/judge/retry.py): a
    transient judge error is run again while the run's policy says so (its
    ``resend``: the retry policy's re-runs and delays, the spend budget's
    room) and stored as 'failed' once they run out; every other error is
    stored as 'failed' at once. A run the pair's ``gate`` refuses (a stop, the
    time budget) leaves the pair for the next run (the row is None); likewise
    when the spend budget has no room left for a re-run. What every attempt
    billed is in the stored tokens, calls and ``cost_usd``."""
    billed = Usage()  # what the attempts that failed have billed
    attempt = 0
    while True:
        attempt += 1
        refusal = gate.why_not_run()
        if refusal is not None:
            return outcomes.deferred(work, attempt - 1, billed, why=refusal.why)
        try:
            result = await _metric_call(work, metrics, judge)
        except CallWithheld as error:  # the pair's gate: it may not start, or another run took it over
            billed.add_billed(error)
            return _withheld(work, gate, billed, attempt)
        except TransientJudgeError as error:
            billed.add_billed(error)
            decision = gate.policy.resend(attempt, error, work=work, billed=billed)
            if isinstance(decision, GiveUp):
                if decision.later:
                    return outcomes.deferred(work, attempt, billed, why=decision.reason)
                return outcomes.failure(work, error, attempt, flow_run_id, billed)
            log.info("%s for trace %s: %s; retrying in %.1fs", work.metric, work.trace_id, error, decision.after_s)
            await asyncio.sleep(decision.after_s)
            continue
        except JudgeflowError as error:
            billed.add_billed(error)
            return outcomes.failure(work, error, attempt, flow_run_id, billed)
        except Exception as error:  # a bug must not sink the run; it is stored and visible
            log.exception("unexpected error scoring %s/%s", work.trace_id, work.metric)
            return outcomes.failure(work, error, attempt, flow_run_id, billed)
        return outcomes.success(work, outcomes.with_billed(result, billed), attempt, flow_run_id, digest)


def _withheld(work: TraceWork, gate: PairGate, billed: Usage, attempt: int) -> Scored:
    """The outcome of a pair whose gate withheld a call: deferred when it
    may not start (a stop, the time or spend budget), taken over when another
    run holds its claim. Its runs count those that sent something."""
    attempts = attempt if billed.calls else attempt - 1
    # a call left waiting in a batch the run stopped waiting on: the gate says why (a stop, the time budget)
    refused = gate.refused if gate.refused is not None else gate.why_not_run()
    if refused is not None and refused is not TAKEN_OVER:
        return outcomes.deferred(work, attempts, billed, why=refused.why)
    log.warning("%s for trace %s: the run's claim moved to another run; its next judge call was not sent",
                work.metric, work.trace_id)
    return outcomes.taken_over(work, billed, attempts)


class PairRun:
    """What the pairs of one batch share: the run, its metrics, its judge and its policy."""

    def __init__(self, settings: Settings, metrics: Metrics, judge: Judge, *, owner: str,
                 flow_run_id: str | None, policy: RunPolicy, claimed_at: float | None) -> None:
        self.settings, self.metrics, self.judge, self.owner = settings, metrics, judge, owner
        self.flow_run_id, self.policy, self.budget, self.claimed_at = flow_run_id, policy, policy.budget, claimed_at

    def priority(self, work: TraceWork, index: int) -> tuple:
        """The place of the batch's ``index``-th pair's judge calls among the
        run's waiting for a slot (judgeflow/judge/wire_slots.py): the longest
        chain of judge calls first (a pair's calls wait as long as its chain),
        then the batch claimed first, then the pair started first, so a pair's
        next call goes before a pair that has not started."""
        return (-self.rounds(work), self.claimed_at or 0.0, index)

    async def score(self, work: TraceWork, digest: str | None, priority: tuple) -> Scored:
        """:meth:`judge` once per content ``digest`` in this run: an identical
        pair already being judged is waited for and copied (judgeflow/run/reuse.py);
        waiting for a twin takes no slot."""
        if digest is None:
            return await self.judge_one(work, digest, priority)
        leader, future = reuse.in_flight.lead_or_follow(self.owner, digest)
        if not leader:
            source = await asyncio.wrap_future(future)
            if source is not None:
                return outcomes.copied(work, source, self.threshold(work), self.flow_run_id, digest)
            return await self.judge_one(work, digest, priority)
        row = None
        try:
            row, outcome = await self.judge_one(work, digest, priority)
            return row, outcome
        finally:
            reuse.in_flight.finish(self.owner, digest, future, None if row is None else reuse.reusable(row))

    async def judge_one(self, work: TraceWork, digest: str | None, priority: tuple) -> Scored:
        """:func:`judge_pair` under the pair's own gate (made from the run's),
        its calls carrying that gate and ``priority`` (and the metric's own judge
        model, if it has one) to the run's judge, whose slots and retry loop
        every model shares; its spend charged to the budget as it ends."""
        gate = self.policy.pair(work, self.claimed_at)
        judge = BoundJudge(self.judge, Call(gate, priority), own_judge_model(self.settings, work.metric))
        row, outcome = await judge_pair(work, self.settings, self.metrics, judge=judge, gate=gate,
                                        flow_run_id=self.flow_run_id, digest=digest)
        if self.budget is not None:
            self.budget.charge(work, outcome.cost_usd, outcome.judge_calls)
        return row, outcome

    def threshold(self, work: TraceWork) -> float:
        return self.metrics[work.metric].effective_threshold

    def rounds(self, work: TraceWork) -> int:
        return self.metrics[work.metric].judge_rounds


def _digests(items: list[TraceWork], settings: Settings, metrics: Metrics) -> dict[tuple[str, str], str]:
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


class BatchWriter:
    """A batch's results, written a few at a time (module doc)."""

    def __init__(self, settings: Settings, owner: str, rescore_before: datetime | None) -> None:
        self.settings, self.owner, self.rescore_before = settings, owner, rescore_before
        self.buffered: list[Scored] = []
        self.written: list[ScoreOutcome] = []
        self.oldest = time.monotonic()  # when the oldest buffered result arrived

    def add(self, scored: list[Scored]) -> None:
        if scored and not self.buffered:
            self.oldest = time.monotonic()
        self.buffered.extend(scored)

    def due(self) -> bool:
        return bool(self.buffered) and (
            len(self.buffered) >= FLUSH_ROWS or time.monotonic() - self.oldest >= FLUSH_INTERVAL_S
        )

    def wait_s(self) -> float | None:
        """How long the next result may be waited for before a write is due."""
        return None if not self.buffered else max(0.0, self.oldest + FLUSH_INTERVAL_S - time.monotonic())

    def flush(self) -> None:
        rows = [row for row, _ in self.buffered if row is not None]
        stored = store_outcomes(self.settings, rows, owner=self.owner, rescore_before=self.rescore_before)
        release_pairs(self.settings, [(o.trace_id, o.metric) for row, o in self.buffered if row is None], self.owner)
        for row, outcome in self.buffered:
            self.written.append(outcome if row is None else outcomes.as_stored(outcome, stored))
        self.buffered.clear()


def batch_run_name() -> str:
    """``score-batch: <trace id> <trace id> ...``: the run page's Task Runs tab
    searches task-run names (a substring match), so a trace id typed there
    finds the batch that scored it, whose artifact has the trace's rows."""
    items = task_run.parameters.get("items") or []
    name = "score-batch: " + " ".join(dict.fromkeys(w.trace_id for w in items))
    return name[:_BATCH_NAME_MAX_CHARS]


def _submit_pairs(pairs: PairRun, items: list[TraceWork], writer: BatchWriter, rescore_before: datetime | None
                  ) -> set[Future]:
    """Put the batch's pairs on the judge loop, each with its priority
    (:meth:`PairRun.priority`). A pair judged before is copied, without a judge call."""
    loop = judge_loop()
    digests = _digests(items, pairs.settings, pairs.metrics)
    stored = reuse.find_done(pairs.settings, list(digests.values()), rescore_before=rescore_before)
    pending: set[Future] = set()
    for index, work in enumerate(sorted(items, key=lambda w: -pairs.rounds(w))):
        digest = digests.get((work.trace_id, work.metric))
        if digest in stored:
            writer.add([outcomes.copied(work, stored[digest], pairs.threshold(work), pairs.flow_run_id, digest)])
            continue
        pending.add(loop.submit(pairs.score, work, digest, pairs.priority(work, index)))
    return pending


# retries=0: its pairs are retried inside it, by the run policy's pair level (judge_pair), and its
# judge calls by the call level; a re-run of the task would judge the pairs already stored again
@task(name="score-batch", task_run_name=batch_run_name, cache_policy=NO_CACHE, persist_result=False, retries=0)
def score_batch(
    items: list[TraceWork],
    settings: Settings,
    owner: str,
    flow_run_id: str | None = None,
    rescore_before: datetime | None = None,
    policy: RunPolicy | None = None,
    claimed_at: float | None = None,
    judge: Judge | None = None,
) -> list[ScoreOutcome]:
    """Score a claimed batch of (trace, metric) pairs and store each result as
    soon as it is known (within ``FLUSH_INTERVAL_S``); see the module doc.
    ``policy``: the run's (judgeflow/run/policy.py; None: the settings' retry
    levels, no limits, no lease keeper); ``claimed_at`` (``time.time()``):
    when the batch was claimed. ``judge``: the run's (:func:`start_judge`);
    without one the batch builds its own and closes it when done."""
    policy = policy if policy is not None else RunPolicy(settings, owner)
    if judge is not None:
        return _score_batch(items, settings, owner, judge, flow_run_id=flow_run_id, rescore_before=rescore_before,
                            policy=policy, claimed_at=claimed_at)
    own = build_judge(judge_config(settings))
    try:
        return _score_batch(items, settings, owner, own, flow_run_id=flow_run_id, rescore_before=rescore_before,
                            policy=policy, claimed_at=claimed_at)
    finally:
        own.close()


def _score_batch(items: list[TraceWork], settings: Settings, owner: str, judge: Judge, *,
                 flow_run_id: str | None, rescore_before: datetime | None, policy: RunPolicy,
                 claimed_at: float | None) -> list[ScoreOutcome]:
    try:
        batch_log = get_run_logger()  # the task run's own logger: INFO reaches the UI
    except MissingContextError:  # called as a plain function (tests)
        batch_log = log
    batch_log.info("scoring %d pair(s) of %d trace(s)", len(items), len({w.trace_id for w in items}))
    pairs = PairRun(settings, build_metrics(settings, judge), judge, owner=owner, flow_run_id=flow_run_id,
                    policy=policy, claimed_at=claimed_at)
    writer = BatchWriter(settings, owner, rescore_before)
    pending = _submit_pairs(pairs, items, writer, rescore_before)
    try:
        while pending:
            done, pending = wait(pending, timeout=writer.wait_s(), return_when=FIRST_COMPLETED)
            writer.add([future.result() for future in done])
            if writer.due() or not pending:
                writer.flush()
        if writer.buffered:
            writer.flush()
    finally:
        for future in pending:  # the batch failed (its writes): do not start what is still queued
            future.cancel()
    _publish_batch_outcomes(writer.written)
    return writer.written


def _publish_batch_outcomes(scored: list[ScoreOutcome]) -> None:
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
        for o in sorted(scored, key=lambda o: (o.trace_id, o.metric))  # a trace's rows together
    ]
    try:
        create_table_artifact(rows, description=f"{len(rows)} (trace, metric) pair(s) of this batch")
    except Exception as error:  # the results are stored; the UI row is a convenience
        log.warning("could not publish the batch's artifact: %s", error)
