"""Metrics made ready before a run scores with them: what a metric needs from
the judge once (a G-Eval metric's evaluation steps written from its criteria,
its spec's ``prepare``) is read from the database, or asked of the judge by
the first run and stored, so every later run scores with the same."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.config.settings import Settings
from judgeflow.db.engine import engine_for
from judgeflow.db.prepared import accept_stored, store
from judgeflow.errors import JudgeAbstained, JudgeflowError
from judgeflow.judge.base import BoundJudge, Judge, Usage
from judgeflow.config.judge_models import own_judge_model
from judgeflow.judge.factory import judge_config, model_judge
from judgeflow.judge.send_gate import Call
from judgeflow.metrics.registry import MetricSpec, spec_of
from judgeflow.metrics.steps import adrive
from judgeflow.judge.judge_loop import judge_loop
from judgeflow.run.policy import RunPolicy

log = logging.getLogger("judgeflow.metrics")


@dataclass
class Prepared:
    """Which metrics a run may score, and what it says about the others."""

    ready: list[str]
    notes: list[str] = field(default_factory=list)
    cost_usd: float = 0.0  # what asking the judge cost (a one-off call, not a pair's)


def unprepared(metrics: list[str]) -> list[str]:
    """The metrics of ``metrics`` still waiting for what they need from the judge once."""
    return [name for name in metrics if (spec := spec_of(name)).prepare is not None and not spec.prepare.ready()]


# retries: the task level, for the database (a dropped connection while reading or storing the steps);
# a run of it re-asks the judge only for what it could not store. Its judge calls are retried by the
# run policy's call level, their replies by the repair level.
@task(name="prepare-metrics", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=1)
def prepare_metrics(settings: Settings, metrics: list[str], policy: RunPolicy) -> Prepared:
    """Hand each metric of ``metrics`` what it was prepared with before (stored),
    or ask the judge for it now and store it, under the run's ``policy`` (a
    stop, the time budget, the spend budget, which is charged what it cost).
    A metric the judge could not prepare is left out of this run (its pairs
    stay pending, named in the notes); one the judge abstains on (the offline
    judge has no rubric) stays in: its pairs are skipped with the judge's reason."""
    waiting = {name: spec_of(name) for name in unprepared(metrics)}
    result = Prepared(ready=list(metrics))
    if not waiting:
        return result
    engine = engine_for(settings)
    with engine.begin() as conn:
        waiting = {name: waiting[name] for name in accept_stored(conn, waiting)}
    if not waiting:
        return result
    judge = model_judge(judge_config(settings))
    try:
        for name, spec in waiting.items():
            _make(settings, engine, judge, spec, result, policy)
    finally:
        judge.close()
    return result


def _make(settings: Settings, engine, judge: Judge, spec: MetricSpec, result: Prepared, policy: RunPolicy) -> None:
    usage = Usage()
    flow = spec.prepare.make(policy.retry.repairs)
    try:
        # the metric's own judge model (if it has one) writes what it needs, as it will judge
        own = BoundJudge(judge, Call(policy.pair(None)), own_judge_model(settings, spec.name))
        value = judge_loop().submit(adrive, flow, own, usage=usage, concurrent=False).result()
    except JudgeAbstained as abstained:
        log.info("%s: %s", spec.name, abstained)
        return
    except JudgeflowError as error:
        result.ready.remove(spec.name)
        result.notes.append(f"{spec.name}: not scored this run: the judge could not write what it needs first "
                            f"({error}); its traces stay pending for the next run")
        log.warning(result.notes[-1])
        return
    finally:
        result.cost_usd += usage.cost_usd or 0.0
        if policy.budget is not None:
            policy.budget.spend(usage.cost_usd)
    with engine.begin() as conn:
        kept = store(conn, spec.name, spec.prepare.key, value, usage.model or judge.model)
    spec.prepare.accept(kept)
    cost = "" if usage.cost_usd is None else f", ${usage.cost_usd:.4f}"
    result.notes.append(f"{spec.name}: its evaluation steps were written by the judge once ({usage.calls} call(s)"
                        f"{cost}, charged to the run's spend budget, not to any pair) and stored; later runs score with the same steps")
