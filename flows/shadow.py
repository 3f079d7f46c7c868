"""Shadow scoring: a candidate judge scores a stratified sample of recent traces
beside the judge in force; only judgeflow.shadow_results is written (see judgeflow.shadow)."""

from __future__ import annotations

from datetime import datetime

from prefect import flow
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from judgeflow.run.entry import run_settings
from judgeflow.run.policy import RunPolicy
from judgeflow.shadow.plan import candidate_settings
from judgeflow.shadow.report import ShadowReport
from judgeflow.tasks.database import ensure_schema
from judgeflow.tasks.preparation import prepare_metrics, unprepared
from judgeflow.tasks.shadow import (
    build_shadow_report,
    publish_shadow_report,
    score_shadow_sample,
    select_shadow_sample,
)
from judgeflow.metrics.registry import chosen


def _run_name() -> str:
    model = flow_run.parameters.get("judge_model")
    return f"shadow-{model or 'configured-judge'}"


@flow(name="shadow-score", flow_run_name=_run_name, task_runner=ThreadPoolTaskRunner(max_workers=4))
def shadow_score(
    since: datetime,
    judge_model: str | None = None,
    metrics: list[str] | None = None,
    segment_by: str | None = None,
    per_segment: int = 50,
    seed: str = "judgeflow-shadow",
    max_concurrency: int | None = None,
) -> ShadowReport:
    """Score up to ``per_segment`` recent results of the judge in force per
    segment of ``segment_by`` (traces created since ``since``) with the
    candidate ``judge_model`` (default: the configured one, i.e. only the
    metric code as it is now) and report how far they agree.
    ``seed`` picks the sample: the same seed, the same traces. The candidate's
    endpoint and key are settings (JUDGEFLOW_SHADOW_JUDGE_API_BASE / _KEY), not
    parameters: Prefect stores parameters in the clear."""
    settings = run_settings(max_concurrency=max_concurrency)
    candidate = candidate_settings(settings, judge_model)
    ensure_schema(settings)
    run_id = str(flow_run.get_id())
    # the candidate judges with the steps the judge in force scores with (stored by its runs)
    names = chosen(metrics)
    # nothing claimed, no budget: the stop request, the retry levels, the calls in flight
    policy = RunPolicy.for_run(settings)
    ready = prepare_metrics(settings, names, policy).ready if unprepared(names) else names
    pairs = select_shadow_sample(settings, ready, since, segment_by, per_segment, seed)
    score_shadow_sample(pairs, candidate, run_id, policy)
    report = build_shadow_report(settings, run_id, candidate.judge_model, segment_by, per_segment)
    publish_shadow_report(report)
    return report
