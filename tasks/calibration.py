"""Running the configured judge over a labelled set (``judgeflow calibrate``).

The pairs are the metrics' ``ascore`` coroutines on the process's judge loop
(judgeflow/judge/judge_loop.py), as a scoring run's are, their calls bounded by
the judge's own slots."""

from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, wait
from datetime import datetime, timezone
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.calibration.labelled import LabelledItem, MetricReport, build_report
from judgeflow.config.settings import Settings
from judgeflow.errors import CallWithheld, JudgeflowError
from judgeflow.judge.base import BoundJudge
from judgeflow.config.judge_models import own_judge_model
from judgeflow.judge.send_gate import Call
from judgeflow.metrics.registry import metric_names
from judgeflow.metrics.result import MetricResult
from judgeflow.model import TraceWork
from judgeflow.run.budget import Reservation, spend_budget
from judgeflow.run.gate import SPEND_SPENT
from judgeflow.run.policy import RunPolicy

log = logging.getLogger("judgeflow.calibration.labelled")
OVER_BUDGET = "not judged: the budget"  # a pair's outcome when it did not fit the budget
_LABELLED_AT = datetime(1970, 1, 1, tzinfo=timezone.utc)  # a labelled item has no trace time; the budget needs none

Job = tuple[str, LabelledItem]
Done = tuple[Job, MetricResult | None, str | None]


def calibration_policy(settings: Settings, budget_usd: float | None) -> RunPolicy:
    """A calibration's policy: its stop request and, with ``budget_usd``, its spend budget."""
    return RunPolicy.for_run(settings, budget=spend_budget(settings, budget_usd,
                                                           why=f"a calibration budget of ${budget_usd:g} is set"
                                                           if budget_usd is not None else ""))


def judge_labelled(settings: Settings, items: list[LabelledItem], budget_usd: float | None = None, *,
                   policy: RunPolicy | None = None) -> list[MetricReport]:
    """Score every labelled (item, metric) with the configured judge and
    compare with the labels. A judge error counts the item as failed (and is
    reported), never stops the calibration. ``policy``: the calibration's
    (None: one made here with ``budget_usd``); a pair starts only while its
    spend budget admits it, the others are counted as not judged."""
    from judgeflow.judge.factory import build_judge, judge_config
    from judgeflow.tasks.scoring import build_metrics

    policy = policy if policy is not None else calibration_policy(settings, budget_usd)
    judge = build_judge(judge_config(settings))
    try:
        metrics = build_metrics(settings, judge)
        jobs = [(metric, item) for item in items for metric in metric_names() if metric in item.labels]
        done = _judge_all(jobs, metrics, policy, judge, settings)
    finally:
        judge.close()
    return _reports(done, {name: metric.effective_threshold for name, metric in metrics.items()})


def _work(index: int, job: Job) -> TraceWork:
    """The pair as the budget estimates it (numbered: two items may share an id)."""
    metric, item = job
    return TraceWork(trace_id=f"{index}:{item.id}", metric=metric, created_at=_LABELLED_AT, input=item.input,
                     output=item.output, context=item.context)


def _judge_all(jobs: list[Job], metrics: dict[str, Any], policy: RunPolicy, judge, settings: Settings) -> list[Done]:
    """Every pair on the judge loop at once (their calls wait for the judge's
    slots), each admitted in order by the policy's spend budget, which waits
    for pairs in flight to tell what they cost before it says no."""
    from judgeflow.judge.judge_loop import judge_loop

    loop, reservation = judge_loop(), Reservation()
    running: dict[Future, tuple[int, TraceWork]] = {}
    done: dict[int, Done] = {}

    def finish_one() -> bool:
        if not running:
            return False
        finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for future in finished:
            index, work = running.pop(future)
            done[index] = future.result()
            if policy.budget is not None:
                result = done[index][1]
                policy.budget.close_one(reservation, (work.trace_id, work.metric),
                                        None if result is None else result.cost_usd)
        return True

    for index, job in enumerate(jobs):
        work = _work(index, job)
        if not policy.admit(work, reservation, finish_one):
            done[index] = (job, None, OVER_BUDGET)
            continue
        own = BoundJudge(judge, Call(policy.pair(None)), own_judge_model(settings, job[0]))
        running[loop.submit(_judge_one, job, metrics, own)] = (index, work)
    while finish_one():
        pass
    return [done[index] for index in sorted(done)]


async def _judge_one(job: Job, metrics: dict[str, Any], judge: BoundJudge) -> Done:
    metric, item = job
    try:
        return job, await metrics[metric].ascore(item.input, item.output, item.context, judge=judge), None
    except CallWithheld as withheld:  # the policy's gate: the spend budget reached, or a stop
        refused = judge.call.gate.refused
        return job, None, OVER_BUDGET if refused is SPEND_SPENT else f"{item.id}: {withheld}"
    except JudgeflowError as error:
        return job, None, f"{item.id}: {type(error).__name__}: {error}"


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


# retries=0: its pairs' calls are retried by the run policy's call level, their replies by the repair
# level; a re-run of the task would judge every pair again
@task(name="judge-labelled-items", cache_policy=NO_CACHE, persist_result=False, retries=0)
def judge_labelled_items(settings: Settings, items: list[LabelledItem], policy: RunPolicy) -> list[MetricReport]:
    return judge_labelled(settings, items, policy=policy)
