"""The sample budget's tasks: plan the night's sample before any judge call,
record which traces are judged (judgeflow/sampling/), and, at the end, enter
what the run billed in the night's ledger and publish the plan with what was
spent.

The run's stop at the budget is the run's own spend budget
(judgeflow/run/budget.py), given what is left of the night's sample budget:
every billed attempt counts, and no pair starts once the bill plus what is in
flight reaches it (:func:`judgeflow.run.budget.run_budget`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, datetime

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from sqlalchemy.exc import DBAPIError

from judgeflow.db.engine import engine_for, source_engine
from judgeflow.sources.trace_source import KeyFilter, trace_source
from judgeflow.db.watermark import ReadPlan
from judgeflow.errors import DatabaseError
from judgeflow.judge.pricing import require_prices
from judgeflow.sampling.decisions import open_run, record_spend, reweigh, settle
from judgeflow.sampling.order import nights_judged_by
from judgeflow.sampling.planner import NightPlan, judged_per_stratum, plan_night, restate, spent_per_stratum
from judgeflow.sampling.table import plan_markdown
from judgeflow.config.settings import Settings

ARTIFACT_KEY = "judgeflow-sample-plan"


def night_plan(settings: Settings, plan: ReadPlan, metrics: list[str], *, since: datetime | None,
               until: datetime | None, sample_rate: float, record: bool, flow_run_id: str | None,
               top_up: bool = False) -> NightPlan:
    """The night's plan over the window ``plan`` reads (``record``: select and record it; ``top_up``: see
    :func:`judgeflow.sampling.planner.plan_night`)."""
    budget = settings.sample_budget_usd
    prices = require_prices(settings, why="a sample plan prices the night's traces" if budget is None
                            else f"a sample budget of ${budget:g} is set")
    f = KeyFilter(lo=plan.lo, since=since, until=until, settle_delay_s=settings.settle_delay_s,
                  sample_rate=sample_rate)
    try:
        return plan_night(settings, trace_source(settings), source_engine(settings), engine_for(settings), f,
                          metrics, prices, budget_usd=budget, record=record, flow_run_id=flow_run_id, top_up=top_up)
    except DBAPIError as exc:
        raise DatabaseError(f"could not plan the night's sample: {exc.orig}") from None


# retries=0: one transaction that plans the night; a failure fails the run before any judge call
@task(name="plan-night-sample", cache_policy=NO_CACHE, persist_result=False, retries=0)
def plan_night_sample(settings: Settings, plan: ReadPlan, metrics: list[str], *, since: datetime | None = None,
                      until: datetime | None = None, sample_rate: float = 1.0,
                      flow_run_id: str | None = None) -> NightPlan:
    """Before any judge call: allocate ``JUDGEFLOW_SAMPLE_BUDGET_USD`` over the
    night's new traces and record which are judged and which not sampled."""
    return night_plan(settings, plan, metrics, since=since, until=until, sample_rate=sample_rate, record=True,
                      flow_run_id=flow_run_id)


# retries=0: one transaction; a top-up that failed leaves the run's selection judged and the rest of the budget
@task(name="top-up-night-sample", cache_policy=NO_CACHE, persist_result=False, retries=0)
def top_up_night_sample(settings: Settings, night: NightPlan, plan: ReadPlan, metrics: list[str], *,
                        since: datetime | None = None, until: datetime | None = None, sample_rate: float = 1.0,
                        flow_run_id: str | None = None) -> bool:
    """The run's selection is judged and it has budget left: plan that again at
    tonight's prices, selecting more of the night's strata (the earlier picks
    kept); ``night`` takes the raised rows. True when more were selected."""
    later = night_plan(settings, plan, metrics, since=since, until=until, sample_rate=sample_rate, record=True,
                       flow_run_id=flow_run_id, top_up=True)
    night.absorb(later)
    return bool(later.topped_up)


# retries=0: a reweighing missed now is caught up by the next (it counts every trace judged since)
@task(name="reweigh-sampled-nights", cache_policy=NO_CACHE, persist_result=False, retries=0)
def reweigh_sampled_nights(settings: Settings) -> int:
    """Traces a sample left out that a run has judged since (a backfill) count
    as judged, and their nights' weights are lowered to match; returns how many."""
    with engine_for(settings).begin() as conn:
        return reweigh(conn)


# retries=0: its ledger entry is one transaction; the run's results are stored already
@task(name="publish-sample-plan", cache_policy=NO_CACHE, persist_result=False, retries=0)
def publish_sample_plan(settings: Settings, night: NightPlan, flow_run_id: str, *, spent_usd: float = 0.0,
                        judged_by: list[str] | None = None) -> NightPlan:
    """Enter what the run billed (every attempt) in the night's ledger, settle
    the sample weights of the night, and of each earlier night whose traces it
    judged, on what was judged, and publish the plan's table with what the run spent per stratum as the
    ``judgeflow-sample-plan`` artifact. ``judged_by``: the runs that judged the
    plan's traces (a sharded night's children, each in the ledger on its own;
    default: this run)."""
    runs = judged_by if judged_by is not None else [flow_run_id]
    if night.budget_usd is not None:
        with engine_for(settings).begin() as conn:
            record_spend(conn, night.night, flow_run_id, night.budget_usd, spent_usd)
            # earlier nights' traces this run judged are settled in their own night, with its weights
            settle(conn, [night.night, *nights_judged_by(conn, runs)])
    spent = spent_per_stratum(engine_for(settings), night.night, runs)
    night.rows = [replace(r, spent_usd=spent.get(r.stratum, 0.0)) for r in night.rows]
    if night.sampled:
        night.restated = restate(night, judged_per_stratum(engine_for(settings), night.night))
    create_markdown_artifact(markdown=plan_markdown(night), key=ARTIFACT_KEY,
                             description="the night's sample: traffic, traces judged, estimated and actual spend")
    return night


# retries=2: an upsert of the shard's own row
@task(name="enter-shard-spend", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=1)
def enter_shard_spend(settings: Settings, night: date, flow_run_id: str, budget_usd: float,
                      spent_usd: float | None) -> None:
    """A sharded night's child in the sample ledger under its own flow run id:
    entered before it judges (None: nothing spent yet; killed, what its results
    recorded counts against the night), then what it billed. Its parent plans
    and publishes the night; the children's spend is theirs."""
    with engine_for(settings).begin() as conn:
        if spent_usd is None:
            open_run(conn, night, flow_run_id, budget_usd)
        else:
            record_spend(conn, night, flow_run_id, budget_usd, spent_usd)
