"""Running the configured judge over a labelled set (``judgeflow calibrate``)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.calibration import METRICS, LabelledItem, MetricReport, build_report
from judgeflow.errors import JudgeflowError
from judgeflow.settings import Settings

log = logging.getLogger("judgeflow.calibration")


def _score(metrics: dict, metric: str, item: LabelledItem):
    if metric == "toxicity":
        return metrics[metric].score(input=item.input, actual_output=item.output)
    return metrics[metric].score(input=item.input, output=item.output, context=item.context)


def judge_labelled(settings: Settings, items: list[LabelledItem]) -> list[MetricReport]:
    """Score every labelled (item, metric) with the configured judge and
    compare with the labels. A judge error counts the item as failed (and is
    reported), never stops the calibration."""
    from judgeflow.judge.factory import build_judge
    from judgeflow.tasks.scoring import build_metrics

    judge = build_judge(settings)
    try:
        return _judge_labelled(settings, items, build_metrics(settings, judge))
    finally:
        judge.close()


def _judge_labelled(settings: Settings, items: list[LabelledItem], metrics: dict) -> list[MetricReport]:
    jobs = [(metric, item) for item in items for metric in METRICS if metric in item.labels]

    def run(job):
        metric, item = job
        try:
            return job, _score(metrics, metric, item), None
        except JudgeflowError as error:
            return job, None, f"{item.id}: {type(error).__name__}: {error}"

    with ThreadPoolExecutor(max_workers=settings.max_concurrency, thread_name_prefix="judgeflow-calibrate") as pool:
        done = list(pool.map(run, jobs))

    thresholds = {"toxicity": metrics["toxicity"].effective_threshold,
                  "hallucination": metrics["hallucination"].effective_threshold}
    reports = []
    for metric in METRICS:
        mine = [d for d in done if d[0][0] == metric]
        if not mine:
            continue
        scored = [(r.score, item.labels[metric]) for (_, item), r, _ in mine if r is not None and r.status == "scored"]
        skipped = sum(1 for _, r, _ in mine if r is not None and r.status != "scored")
        errors = [e for _, _, e in mine if e is not None]
        for error in errors:
            log.warning("calibration: %s failed for %s", metric, error)
        reports.append(build_report(metric, thresholds[metric], scored, labelled=len(mine), skipped=skipped,
                                    failed=len(errors), errors=errors))
    return reports


@task(name="judge-labelled-items", cache_policy=NO_CACHE, persist_result=False)
def judge_labelled_items(settings: Settings, items: list[LabelledItem]) -> list[MetricReport]:
    return judge_labelled(settings, items)
