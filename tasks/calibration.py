"""Running the configured judge over a labelled set (``judgeflow calibrate``).

The pairs are the metrics' ``ascore`` coroutines on the process's judge loop
(judgeflow/judge/judge_loop.py), as a scoring run's are, their calls bounded by
the judge's own slots."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.calibration.labelled import LabelledItem, MetricReport, build_report
from judgeflow.calibration.plan import SpendLimit, pair_estimator
from judgeflow.config.settings import Settings
from judgeflow.errors import JudgeflowError
from judgeflow.judge.pricing import require_prices
from judgeflow.metrics.registry import metric_names
from judgeflow.metrics.result import MetricResult

log = logging.getLogger("judgeflow.calibration.labelled")
OVER_BUDGET = "not judged: the budget"  # a pair's outcome when it did not fit the budget

Job = tuple[str, LabelledItem]
Done = tuple[Job, MetricResult | None, str | None]


def judge_labelled(settings: Settings, items: list[LabelledItem],
                   budget_usd: float | None = None) -> list[MetricReport]:
    """Score every labelled (item, metric) with the configured judge and
    compare with the labels. A judge error counts the item as failed (and is
    reported), never stops the calibration. With ``budget_usd``, a pair
    starts only while it fits (``SpendLimit``); the others are counted as not judged."""
    from judgeflow.judge.factory import build_judge, judge_config
    from judgeflow.judge.judge_loop import judge_loop
    from judgeflow.tasks.scoring import build_metrics

    limit = None if budget_usd is None else SpendLimit(budget_usd)
    estimate = None if limit is None else pair_estimator(settings)
    if limit is not None and estimate is None:
        require_prices(settings, why=f"a calibration budget of ${budget_usd:g} is set")
    judge = build_judge(judge_config(settings))
    try:
        metrics = build_metrics(settings, judge)
        jobs = [(metric, item) for item in items for metric in metric_names() if metric in item.labels]
        done = judge_loop().submit(_judge_all, jobs, metrics, settings.max_concurrency, limit, estimate).result()
    finally:
        judge.close()
    return _reports(done, {name: metric.effective_threshold for name, metric in metrics.items()})


async def _judge_all(jobs: list[Job], metrics: dict[str, Any], pairs_at_once: int, limit: SpendLimit | None,
                     estimate) -> list[Done]:
    # as many pairs at a time as the judge may have calls in flight: with a budget, a pair starts
    # once the ones before it have told what they cost
    started = asyncio.Semaphore(pairs_at_once)

    async def one(job: Job) -> Done:
        async with started:
            return await _judge_one(job, metrics, limit, estimate(job[1], job[0]) if estimate else 0.0)

    return list(await asyncio.gather(*(one(job) for job in jobs)))


async def _judge_one(job: Job, metrics: dict[str, Any], limit: SpendLimit | None, cost: float) -> Done:
    metric, item = job
    if limit is not None and not limit.reserve(cost):
        return job, None, OVER_BUDGET
    result = None
    try:
        result = await metrics[metric].ascore(item.input, item.output, item.context)
        return job, result, None
    except JudgeflowError as error:
        return job, None, f"{item.id}: {type(error).__name__}: {error}"
    finally:
        if limit is not None:
            limit.close(cost, None if result is None else result.cost_usd)


def _reports(done: list[Done], thresholds: dict[str, float]) -> list[MetricReport]:
    reports = []
    for metric in metric_names():
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
