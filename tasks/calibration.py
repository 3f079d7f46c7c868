"""Running the configured judge over a labelled set (``judgeflow calibrate``)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.calibration.labelled import METRICS, LabelledItem, MetricReport, build_report
from judgeflow.calibration.plan import SpendLimit, pair_estimator
from judgeflow.errors import JudgeflowError
from judgeflow.judge.pricing import require_prices
from judgeflow.config.settings import Settings

log = logging.getLogger("judgeflow.calibration.labelled")
OVER_BUDGET = "not judged: the budget"  # a pair's outcome when it did not fit the budget


def _score(metrics: dict, metric: str, item: LabelledItem):
    if metric == "toxicity":
        return metrics[metric].score(input=item.input, actual_output=item.output)
    return metrics[metric].score(input=item.input, output=item.output, context=item.context)


def judge_labelled(settings: Settings, items: list[LabelledItem],
                   budget_usd: float | None = None) -> list[MetricReport]:
    """Score every labelled (item, metric) with the configured judge and
    compare with the labels. A judge error counts the item as failed (and is
    reported), never stops the calibration. With ``budget_usd``, a pair
    starts only while it fits (``SpendLimit``); the others are counted as not judged."""
    from judgeflow.judge.factory import build_judge
    from judgeflow.tasks.scoring import build_metrics

    judge = build_judge(settings)
    try:
        return _judge_labelled(settings, items, build_metrics(settings, judge), budget_usd)
    finally:
        judge.close()


def _judge_labelled(settings: Settings, items: list[LabelledItem], metrics: dict,
                    budget_usd: float | None) -> list[MetricReport]:
    jobs = [(metric, item) for item in items for metric in METRICS if metric in item.labels]
    limit = None if budget_usd is None else SpendLimit(budget_usd)
    estimate = None if limit is None else pair_estimator(settings)
    if limit is not None and estimate is None:
        require_prices(settings, why=f"a calibration budget of ${budget_usd:g} is set")

    def run(job):
        metric, item = job
        cost = estimate(item, metric) if estimate else 0.0
        if limit is not None and not limit.reserve(cost):
            return job, None, OVER_BUDGET
        result = None
        try:
            result = _score(metrics, metric, item)
            return job, result, None
        except JudgeflowError as error:
            return job, None, f"{item.id}: {type(error).__name__}: {error}"
        finally:
            if limit is not None:
                limit.close(cost, None if result is None else result.cost_usd)

    with ThreadPoolExecutor(max_workers=settings.max_concurrency, thread_name_prefix="judgeflow-calibrate") as pool:
        done = list(pool.map(run, jobs))

    thresholds = {"toxicity": metrics["toxicity"].effective_threshold,
                  "hallucination": metrics["hallucination"].effective_threshold}
    reports = []
    for metric in METRICS:
        mine = [d for d in done if d[0][0] == metric]
        if not mine:
            continue
        over_budget = sum(1 for _, _, e in mine if e is OVER_BUDGET)
        scored = [(r.score, item.labels[metric]) for (_, item), r, _ in mine if r is not None and r.status == "scored"]
        skipped = sum(1 for _, r, _ in mine if r is not None and r.status != "scored")
        errors = [e for _, _, e in mine if e is not None and e is not OVER_BUDGET]
        for error in errors:
            log.warning("calibration: %s failed for %s", metric, error)
        reports.append(build_report(metric, thresholds[metric], scored, labelled=len(mine), skipped=skipped,
                                    failed=len(errors), errors=errors, over_budget=over_budget))
    return reports


@task(name="judge-labelled-items", cache_policy=NO_CACHE, persist_result=False)
def judge_labelled_items(settings: Settings, items: list[LabelledItem],
                         budget_usd: float | None = None) -> list[MetricReport]:
    return judge_labelled(settings, items, budget_usd)
