"""`judgeflow score` and `judgeflow backfill`: a scoring flow run, now, in this process."""

from __future__ import annotations

from typing import Optional

import typer

from judgeflow.cli.command import VERBOSE_HELP, announce_database, command_settings, quiet_unless, use_prefect
from judgeflow.cli.runs import exit_if_stopped, run_flow, start_judge_early
from judgeflow.cli.errors import clear_errors
from judgeflow.cli.metric_option import chosen_metrics, metric_option

BATCH_SIZE_HELP = "(trace, metric) pairs claimed per batch (default: 8 per judge call in flight, at least 100)"
JUDGE_PROCESSES_HELP = (
    "worker processes making judge calls (default JUDGEFLOW_JUDGE_PROCESSES, else one per core, at most 4; "
    "1: in this process)"
)
SAMPLE_BUDGET_HELP = (
    "judge a stratified sample of the new traces that fits this many USD when judging all would cost more; "
    "the rest is recorded as not sampled (default JUDGEFLOW_SAMPLE_BUDGET_USD)"
)
PLAN_HELP = (
    "print the sample plan per stratum (traffic, traces to judge, cost, smallest rise detected) and exit: "
    "no judge call, nothing recorded"
)
BATCH_HELP = (
    "send the judge calls through the provider's batch API: about half the price, answers within its window "
    "(up to 24 h); for nightly runs, not interactive ones (default JUDGEFLOW_JUDGE_BATCH)"
)
CANCEL_BATCHES_HELP = "with --batch: a stop (Ctrl-C) or the end of the time budget cancels the batches still out"
SHARDS_HELP = (
    "the night as N child flow runs claiming from the same backlog, on the work pool that serves "
    "the shard deployment, else as N processes here; alerts, trend and the summary once "
    "(docs/running.md)"
)
BUDGET_HELP = (
    "stop claiming once spent + in-flight judge cost reaches this many USD; the rest stays pending "
    "(default JUDGEFLOW_RUN_BUDGET_USD)"
)


@clear_errors
def score(
    ctx: typer.Context,
    limit: Optional[int] = typer.Option(None, help="score at most this many traces"),
    since: Optional[str] = typer.Option(None, help="only traces created at/after this (ISO time or e.g. 7d)"),
    until: Optional[str] = typer.Option(None, help="only traces created before this"),
    batch_size: Optional[int] = typer.Option(None, help=BATCH_SIZE_HELP),
    sample_rate: float = typer.Option(1.0, help="score this deterministic share of traces"),
    max_concurrency: Optional[int] = typer.Option(
        None, help="judge calls in flight (default JUDGEFLOW_MAX_CONCURRENCY)"
    ),
    alerts: bool = typer.Option(True, help="evaluate alert rules after scoring"),
    judge_processes: Optional[int] = typer.Option(None, help=JUDGE_PROCESSES_HELP),
    settle_delay: Optional[str] = typer.Option(
        None, help="only score traces older than this, e.g. 10m (default JUDGEFLOW_SETTLE_DELAY, else 0)"
    ),
    # read as text, as --sample-budget-usd: the settings refuse a bad amount in one line
    budget_usd: Optional[str] = typer.Option(None, help=BUDGET_HELP),
    retry_failed: bool = typer.Option(
        False, "--retry-failed",
        help="also retry pairs given up after failing in JUDGEFLOW_MAX_RUNS_PER_PAIR runs",
    ),
    # read as text: the settings refuse a bad amount in one line (judgeflow.config.settings.usd_budget)
    sample_budget_usd: Optional[str] = typer.Option(None, help=SAMPLE_BUDGET_HELP),
    plan: bool = typer.Option(False, "--plan", help=PLAN_HELP),
    metric: Optional[list[str]] = metric_option(),
    batch: Optional[bool] = typer.Option(None, "--batch/--no-batch", help=BATCH_HELP),
    cancel_batches: bool = typer.Option(False, "--cancel-batches", help=CANCEL_BATCHES_HELP),
    shards: int = typer.Option(1, "--shards", help=SHARDS_HELP),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
) -> None:
    """Score every trace without a result, once, now. Ctrl-C stops it: calls in flight finish, exit code 130."""
    quiet_unless(verbose)
    from judgeflow.cli.pending import anything_pending
    from judgeflow.cli.timeparse import parse_when

    settings = command_settings(max_concurrency=max_concurrency, judge_processes=judge_processes,
                                settle_delay=settle_delay, run_budget_usd=budget_usd,
                                sample_budget_usd=sample_budget_usd, judge_batch=batch)
    _refuse_what_cannot_run(settings, plan=plan, cancel_batches=cancel_batches, shards=shards)
    metrics = chosen_metrics(metric)  # None: every registered metric
    announce_database(settings)
    start, end = parse_when(since), parse_when(until)
    if plan:
        return _print_plan(settings, since=start, until=end, sample_rate=sample_rate, metrics=metrics)
    if not anything_pending(settings, since=start, until=end, sample_rate=sample_rate, retry_failed=retry_failed,
                            metrics=metrics):
        _nothing_to_score(settings, alerts=alerts)
        return
    # a sharded night judges in its children: none here
    judge = None if settings.judge_batch or shards > 1 else start_judge_early(settings)
    use_prefect(settings)
    summary = _run_night(ctx, settings, shards, judge, batch_size=batch_size, limit=limit, since=start, until=end,
                         metrics=metrics,
                         sample_rate=sample_rate, max_concurrency=max_concurrency, evaluate_alerts=alerts,
                         judge_processes=judge_processes, settle_delay=settle_delay,
                         budget_usd=settings.run_budget_usd, retry_failed=retry_failed,
                         sample_budget_usd=settings.sample_budget_usd, batch=settings.judge_batch,
                         cancel_batches=cancel_batches)
    typer.echo(summary.markdown())
    exit_if_stopped(summary)


def _run_night(ctx, settings, shards: int, judge, **parameters):
    """The scoring flow run; with ``shards`` > 1 its children are started from the deployment
    :func:`judgeflow.cli.shards.children_deployment` gives for the time of the run."""
    from judgeflow.cli.shards import children_deployment
    from judgeflow.flows.scoring import score_new_traces

    with children_deployment(shards) as shard_deployment:
        return run_flow(ctx, "score", settings, lambda: score_new_traces(
            shards=shards, shard_deployment=shard_deployment, **parameters), judge=judge)


def _print_plan(settings, *, since, until, sample_rate: float, metrics: list[str] | None) -> None:
    """`judgeflow score --plan`: the night's sample plan, with no judge call and nothing recorded."""
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.sampling.table import plan_text
    from judgeflow.tasks.claims import plan_source_reads
    from judgeflow.tasks.sampling import night_plan
    from judgeflow.metrics.registry import chosen

    migrate.upgrade(engine_for(settings))
    metrics = chosen(metrics)
    plan = plan_source_reads.fn(settings, metrics, sample_rate=sample_rate,
                                ranged=since is not None or until is not None)
    night = night_plan(settings, plan, metrics, since=since, until=until, sample_rate=sample_rate, record=False,
                       flow_run_id=None)
    typer.echo(plan_text(night))


def _refuse_what_cannot_run(settings, *, plan: bool, cancel_batches: bool, shards: int) -> None:
    from judgeflow.errors import ConfigError
    from judgeflow.run.shards import refusal

    refused = refusal(shards, judge_batch=settings.judge_batch)
    if refused:
        raise ConfigError(refused)
    _refuse_budgets_without_prices(settings, plan=plan)
    _refuse_batches_that_cannot_be(settings, cancel_batches=cancel_batches)


def _refuse_budgets_without_prices(settings, *, plan: bool) -> None:
    """A run or sample budget (or --plan) needs the judge's prices: refused here,
    before Prefect starts, rather than as a failed flow run."""
    from judgeflow.judge.pricing import require_prices

    if settings.run_budget_usd is not None:
        require_prices(settings, why="a run budget is set")
    if settings.sample_budget_usd is not None or plan:
        require_prices(settings, why="a sample budget is set" if settings.sample_budget_usd else "--plan prices traces")


def _refuse_batches_that_cannot_be(settings, *, cancel_batches: bool) -> None:
    """A judge that cannot batch (a provider or model litellm has no batch API
    for, the offline judge): refused here in one line, before anything starts."""
    if cancel_batches and not settings.judge_batch:
        raise typer.BadParameter("--cancel-batches applies to a run with --batch (or JUDGEFLOW_JUDGE_BATCH=true)")
    if not settings.judge_batch:
        return
    from judgeflow.judge.factory import batch_api, judge_config

    batch_api(judge_config(settings))


def _nothing_to_score(settings, *, alerts: bool) -> None:
    """No flow run: say so, and evaluate the alert rules as a run would at its end."""
    from judgeflow.sources.trace_source import trace_source

    typer.echo(f"nothing to score: no (trace, metric) pair is pending in {trace_source(settings).display}; "
               "no flow run was started")
    from judgeflow.cli.phoenix import write_back_if_on

    write_back_if_on(settings)  # scores Phoenix does not have yet are written all the same
    if not alerts:
        return
    from judgeflow.cli.alerts import _flush_prefect_events, evaluated_line
    from judgeflow.alerts.service import evaluate_rules
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for

    use_prefect(settings)  # the alert events go to the same Prefect server as the runs' do
    engine = engine_for(settings)
    migrate.upgrade(engine)
    evaluations = evaluate_rules(settings, engine=engine)
    _flush_prefect_events()
    typer.echo(evaluated_line(evaluations))


@clear_errors
def backfill(
    ctx: typer.Context,
    since: str = typer.Option(..., help="start of the range (ISO time or e.g. 30d)"),
    until: str = typer.Option(..., help="end of the range, exclusive (ISO time or e.g. 0s for now)"),
    rescore: bool = typer.Option(False, help="also re-score traces that already have a result"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    batch_size: Optional[int] = typer.Option(None, help=BATCH_SIZE_HELP),
    max_concurrency: Optional[int] = typer.Option(
        None, help="judge calls in flight (default JUDGEFLOW_MAX_CONCURRENCY)"
    ),
    judge_processes: Optional[int] = typer.Option(None, help="see `judgeflow score --help`"),
    budget_usd: Optional[str] = typer.Option(None, help="see `judgeflow score --help`"),
    batch: Optional[bool] = typer.Option(None, "--batch/--no-batch", help=BATCH_HELP),
    cancel_batches: bool = typer.Option(False, "--cancel-batches", help=CANCEL_BATCHES_HELP),
    metric: Optional[list[str]] = metric_option(),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
) -> None:
    """Score (or with --rescore, re-score) every trace in a time range."""
    quiet_unless(verbose)
    from judgeflow.status.backfill import estimate_backfill
    from judgeflow.cli.timeparse import parse_when

    settings = command_settings(max_concurrency=max_concurrency, judge_processes=judge_processes,
                                run_budget_usd=budget_usd, judge_batch=batch)
    _refuse_batches_that_cannot_be(settings, cancel_batches=cancel_batches)
    metrics = chosen_metrics(metric)  # None: every registered metric
    start, end = parse_when(since), parse_when(until)
    if start >= end:
        raise typer.BadParameter("--since must be before --until")
    estimate = estimate_backfill(settings, since=start, until=end, rescore=rescore, metrics=metrics)
    typer.echo(estimate.describe())
    if estimate.pairs == 0:
        return
    if not yes and not typer.confirm("Start the backfill?", default=False):
        typer.echo("aborted; nothing was scored")
        raise typer.Exit(1)
    judge = None if settings.judge_batch else start_judge_early(settings)
    from judgeflow.flows.backfill import backfill_traces

    use_prefect(settings)
    summary = run_flow(ctx, "backfill", settings, lambda: backfill_traces(
        since=start, until=end, rescore=rescore, metrics=metrics, batch_size=batch_size, max_concurrency=max_concurrency,
        judge_processes=judge_processes, budget_usd=settings.run_budget_usd, batch=settings.judge_batch,
        cancel_batches=cancel_batches), judge=judge)
    typer.echo(summary.markdown())
    exit_if_stopped(summary)
