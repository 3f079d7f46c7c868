"""Shadow scoring's I/O: select the sample, judge it with the candidate into
``judgeflow.shadow_results`` (never eval_results), report (see judgeflow.shadow)."""

from __future__ import annotations

import json
import logging
from concurrent.futures import as_completed
from datetime import datetime

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from judgeflow.db.engine import engine_for
from judgeflow.sources.table import SourceTable
from judgeflow.errors import ConfigError, DatabaseError
from judgeflow.judge.factory import build_judge, judge_config
from judgeflow.judge.base import BoundJudge
from judgeflow.judge.send_gate import Call
from judgeflow.run.policy import RunPolicy
from judgeflow.run.progress import RunReporter
from judgeflow.config.scrub import scrub
from judgeflow.config.settings import Settings
from judgeflow.shadow.report import ShadowReport, build_report
from judgeflow.shadow.sample import ShadowPair, add_conversations, select_sample
from judgeflow.sources.identity import result_source
from judgeflow.judge.judge_loop import judge_loop
from judgeflow.tasks.scoring import build_metrics, judge_pair

log = logging.getLogger("judgeflow.shadow")

SHADOW_REPORT_KEY = "judgeflow-shadow-report"
_WRITE_ROWS = 200

_INSERT = text(
    """
    INSERT INTO judgeflow.shadow_results (
        shadow_run_id, trace_id, metric, segment, stratum, trace_created_at, metric_version, judge_model, status,
        score, passed, threshold, reason, error, judge_calls, prompt_tokens, completion_tokens, cost_usd, latency_ms,
        current_metric_version, current_judge_model, current_status, current_score, current_passed, current_reason,
        current_judge_calls, current_prompt_tokens, current_completion_tokens, current_cost_usd)
    VALUES (
        :shadow_run_id, :trace_id, :metric, CAST(:segment AS jsonb), :stratum, :trace_created_at, :metric_version,
        :judge_model, :status, :score, :passed, :threshold, :reason, :error, :judge_calls, :prompt_tokens,
        :completion_tokens, :cost_usd, :latency_ms, :current_metric_version, :current_judge_model, :current_status,
        :current_score, :current_passed, :current_reason, :current_judge_calls, :current_prompt_tokens,
        :current_completion_tokens, :current_cost_usd)
    ON CONFLICT (shadow_run_id, trace_id, metric) DO UPDATE SET
        status = excluded.status, score = excluded.score, passed = excluded.passed, threshold = excluded.threshold,
        reason = excluded.reason, error = excluded.error, judge_calls = excluded.judge_calls,
        prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
        cost_usd = excluded.cost_usd, latency_ms = excluded.latency_ms, metric_version = excluded.metric_version,
        judge_model = excluded.judge_model, scored_at = now()
    """
)


# retries: a read of the database only, run again on a dropped connection
@task(name="select-shadow-sample", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def select_shadow_sample(
    settings: Settings, metrics: list[str], since: datetime, segment_by: str | None, per_segment: int, seed: str
) -> list[ShadowPair]:
    """The stratified sample of recent results of the judge in force (judgeflow.shadow.sample), each
    sampled session with its conversation."""
    if settings.source != "table":
        # the sample joins JUDGEFLOW_TRACES_TABLE in judgeflow's shape; a preset is not read here
        raise ConfigError(f"judgeflow shadow reads JUDGEFLOW_SOURCE=table only, not {settings.source}")
    with engine_for(settings).connect() as conn:
        pairs = select_sample(conn, SourceTable.parse(settings.traces_table), metrics=metrics, since=since,
                              segment_by=segment_by, per_segment=per_segment, seed=seed,
                              result_source=result_source(settings))
        return add_conversations(conn, settings, pairs)


def _row(pair: ShadowPair, result: dict, shadow_run_id: str) -> dict:
    cur = pair.current
    return {
        "shadow_run_id": shadow_run_id, "trace_id": pair.work.trace_id, "metric": pair.work.metric,
        "segment": json.dumps(pair.work.segment), "stratum": pair.stratum,
        "trace_created_at": pair.work.created_at,
        **{k: result.get(k) for k in (
            "metric_version", "judge_model", "status", "score", "passed", "threshold", "reason", "error",
            "judge_calls", "prompt_tokens", "completion_tokens", "cost_usd", "latency_ms")},
        "current_metric_version": cur.metric_version, "current_judge_model": cur.judge_model,
        "current_status": cur.status, "current_score": cur.score, "current_passed": cur.passed,
        "current_reason": cur.reason, "current_judge_calls": cur.judge_calls,
        "current_prompt_tokens": cur.prompt_tokens, "current_completion_tokens": cur.completion_tokens,
        "current_cost_usd": cur.cost_usd,
    }


def _write(settings: Settings, rows: list[dict]) -> None:
    if not rows:
        return
    try:
        with engine_for(settings).begin() as conn:
            conn.execute(_INSERT, rows)
    except DBAPIError as exc:
        raise DatabaseError(f"could not store shadow results: {exc.orig}") from None


# retries=0: its pairs are re-run by the run policy's pair level, their calls by the call level
@task(name="score-shadow-sample", cache_policy=NO_CACHE, persist_result=False, retries=0)
def score_shadow_sample(
    pairs: list[ShadowPair], candidate: Settings, shadow_run_id: str, policy: RunPolicy
) -> dict[str, int]:
    """Judge each sampled pair with the candidate (the scoring run's machinery:
    same metrics code, judge, retries and concurrency bound) under the run's
    ``policy`` (nothing claimed, no budget: a stop only) and store each
    result in judgeflow.shadow_results beside the current judge's. A pair the
    candidate cannot score is stored as 'failed', never fails the run.
    Returns the count per status."""
    judge = build_judge(judge_config(candidate))
    try:
        return _score_sample(pairs, candidate, shadow_run_id, policy, judge)
    finally:
        judge.close()


async def _judge_one(work, candidate: Settings, metrics, judge, gate, shadow_run_id: str):
    """One shadow pair through the pair level's loop, its calls carrying its gate (a stop) to the judge."""
    return await judge_pair(work, candidate, metrics, judge=BoundJudge(judge, Call(gate)), gate=gate,
                            flow_run_id=shadow_run_id)


def _score_sample(pairs: list[ShadowPair], candidate: Settings, shadow_run_id: str, policy: RunPolicy,
                  judge) -> dict[str, int]:
    metrics = build_metrics(candidate, judge)
    loop = judge_loop()
    futures = {  # every pair at once: their calls wait for the judge's bound
        loop.submit(_judge_one, p.work, candidate, metrics, judge, policy.pair(p.work), shadow_run_id): p
        for p in pairs
    }
    counts: dict[str, int] = {}
    rows: list[dict] = []
    progress = RunReporter(len(pairs), flow_run_id=shadow_run_id)  # the CLI's display, when it watches
    try:
        for future in as_completed(futures):
            result, outcome = future.result()
            progress.add([outcome])
            if result is None:  # no time budget here: not expected, but never stored half
                continue
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            rows.append(_row(futures[future], result, shadow_run_id))
            if len(rows) >= _WRITE_ROWS:
                _write(candidate, rows)
                rows = []
        _write(candidate, rows)
        progress.finish()
    finally:
        for future in futures:
            future.cancel()
    log.info("shadow run %s: %d pair(s) judged by %s: %s", shadow_run_id, len(pairs), candidate.judge_model,
             ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none")
    return counts


# retries: a read of the database only
@task(name="build-shadow-report", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def build_shadow_report(
    settings: Settings, shadow_run_id: str, candidate_model: str, segment_by: str | None, per_segment: int
) -> ShadowReport:
    with engine_for(settings).connect() as conn:
        return build_report(conn, shadow_run_id, candidate_model=candidate_model, segment_by=segment_by,
                            per_segment=per_segment)


# retries=0: a view; a failure to publish is logged
@task(name="publish-shadow-report", cache_policy=NO_CACHE, persist_result=False, retries=0)
def publish_shadow_report(report: ShadowReport) -> None:
    """The report as a markdown artifact; a view: a failure to publish is logged."""
    try:
        create_markdown_artifact(key=SHADOW_REPORT_KEY, markdown=scrub(report.render_markdown()),
                                 description=f"judgeflow shadow report: {report.candidate_model}")
    except Exception as error:
        log.warning("could not publish the shadow report artifact: %s", error)
