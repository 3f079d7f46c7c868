"""`judgeflow shadow` and `judgeflow calibrate`: how far a judge agrees with
the judge in force, or with human labels."""

from __future__ import annotations

import json
from typing import Optional

import typer

from judgeflow.cli.command import command_settings, quiet_unless, use_prefect
from judgeflow.cli.errors import clear_errors
from judgeflow.cli.metric_option import chosen_metrics, metric_option


@clear_errors
def shadow(
    judge_model: Optional[str] = typer.Option(
        None, "--judge-model", help="the candidate judge (a litellm model string, or offline); default: the "
        "configured judge, to compare the metric code as it is now (edited prompts) with the results in force"
    ),
    judge_api_base: Optional[str] = typer.Option(
        None, "--judge-api-base", help="the candidate's API base (or JUDGEFLOW_SHADOW_JUDGE_API_BASE); another base "
        "than the production judge's needs --judge-api-key: the production key is never sent there"
    ),
    judge_api_key: Optional[str] = typer.Option(
        None, "--judge-api-key", help="the candidate's API key (better: JUDGEFLOW_SHADOW_JUDGE_API_KEY, which no "
        "process listing shows)"
    ),
    size: int = typer.Option(50, "--size", min=1, help="pairs per segment (a segment with fewer gives all it has)"),
    segment_by: Optional[str] = typer.Option(
        None, "--segment-by", help="metadata key to stratify by (default: the first JUDGEFLOW_ALERT_SEGMENT_BY "
        "key; '' for none)"
    ),
    since: str = typer.Option("7d", help="sample traces created since this (ISO time or e.g. 7d)"),
    metric: Optional[list[str]] = metric_option(),
    seed: str = typer.Option("judgeflow-shadow", help="picks the sample: the same seed, the same traces"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="print every log line, not only warnings and errors"
    ),
) -> None:
    """Score a stratified sample of recent traces with a candidate judge beside the judge in force and
    report how far they agree (kappa, failing rates per segment, cost). Writes only judgeflow.shadow_results."""
    quiet_unless(verbose)
    # the candidate's endpoint and key are settings of this one build, never flow parameters
    settings = command_settings(shadow_judge_api_base=judge_api_base, shadow_judge_api_key=judge_api_key)
    run_shadow(settings, judge_model=judge_model, size=size,
               segment_by=segment_by, since=since, metrics=metric, seed=seed, yes=yes, as_json=as_json)


@clear_errors
def calibrate(
    path: Optional[str] = typer.Argument(
        None, metavar="FILE.jsonl", help="labelled set: one JSON object per line with input, output, context, labels"
    ),
    sample: bool = typer.Option(False, "--sample", help="use the labelled set shipped with judgeflow"),
    prefect: bool = typer.Option(
        False, "--prefect", help="run as the calibrate-judge flow and publish the report as Prefect artifacts"
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask before judging"),
    budget_usd: Optional[str] = typer.Option(  # read as text: a bad amount is refused in one line
        None, help="judge a pair only while spent + in-flight estimated cost stays within this many USD"
    ),
    metric: Optional[list[str]] = metric_option(
        "judge only this metric's labels, repeatable (default: every labelled metric)"
    ),
) -> None:
    """Run the configured judge over human-labelled traces and report how well it agrees:
    Cohen's kappa, precision/recall/F1 at the configured thresholds, and the threshold
    that would agree best. Shows the estimated cost and asks first (--yes skips the question)."""
    from judgeflow.calibration.labelled import SAMPLE_PATH

    if (path is None) == (not sample):
        raise typer.BadParameter("give FILE.jsonl or --sample (not both)")
    from judgeflow.config.settings import usd_budget

    settings = command_settings()
    run_calibrate(path=str(SAMPLE_PATH) if sample else path, prefect=prefect, yes=yes,
                  budget_usd=usd_budget("--budget-usd", budget_usd), settings=settings,
                  metrics=chosen_metrics(metric))


def run_shadow(
    settings, *, judge_model: str | None, size: int, segment_by: str | None,
    since: str, metrics: list[str] | None, seed: str, yes: bool, as_json: bool,
) -> None:
    """Plan, show the cost, ask, run the shadow-score flow, print the report."""
    from judgeflow.shadow.plan import candidate_settings, plan_shadow
    from judgeflow.metrics.registry import chosen as every_if_none
    from judgeflow.cli.timeparse import parse_when

    chosen = every_if_none(chosen_metrics(metrics))
    if segment_by is None:
        segment_by = settings.alert_segment_keys[0] if settings.alert_segment_keys else None
    segment_by = segment_by or None  # '' asks for no stratification
    start = parse_when(since)
    candidate = candidate_settings(settings, judge_model)
    plan = plan_shadow(settings, candidate, metrics=chosen, since=start, segment_by=segment_by, per_segment=size,
                       seed=seed)
    typer.echo(plan.describe(size, segment_by), err=as_json)
    if plan.pairs == 0:
        typer.echo("nothing to compare: no scored results of the judge in force since "
                   f"{start:%Y-%m-%d %H:%M}Z", err=as_json)
        return
    if not yes and not typer.confirm("Start the shadow run?", default=False, err=as_json):
        typer.echo("aborted; nothing was judged", err=as_json)
        raise typer.Exit(1)
    from judgeflow.flows.shadow import shadow_score

    from judgeflow.run.entry import StopRequest, entered
    from judgeflow.infra.prefect_server import ui_url_without_import
    from judgeflow.cli.console import EXIT_STOPPED, watched_run

    use_prefect(settings)
    from judgeflow.run.account import account_limit

    account_limit(settings)  # the account limit in Prefect, or one line and exit 2
    # on the terminal: progress, and Ctrl-C stops judging (the report covers what was judged)
    stop = StopRequest()
    with watched_run("shadow", stop, ui_url=ui_url_without_import(settings)) as display, \
            entered(settings, stop=stop, observer=display):
        report = shadow_score(since=start, judge_model=judge_model, metrics=chosen,
                              segment_by=segment_by, per_segment=size, seed=seed)
        stopped = stop.requested()
    typer.echo(json.dumps(report.model_dump(mode="json"), indent=2) if as_json else report.render_text())
    if stopped:
        raise typer.Exit(EXIT_STOPPED)


def run_calibrate(*, path: str, prefect: bool, yes: bool, budget_usd: float | None, settings,
                  metrics: list[str] | None = None) -> None:
    """Read the labelled set (only ``metrics``' labels, None: all), show the cost, ask, judge, print the report."""
    from judgeflow.calibration.labelled import load_labelled, only_metrics, render
    from judgeflow.calibration.plan import plan_calibration
    from judgeflow.judge.pricing import require_prices

    items = only_metrics(load_labelled(path), metrics)  # a file it cannot read is a ConfigError: one line, exit 2
    if metrics and not items:
        from judgeflow.errors import MetricError

        raise MetricError(f"{path} has no label for {', '.join(metrics or [])}")
    if budget_usd is not None:
        require_prices(settings, why=f"a calibration budget of ${budget_usd:g} is set")
    plan = plan_calibration(settings, items)
    typer.echo(plan.describe())
    if budget_usd is not None:
        typer.echo(f"budget ${budget_usd:,.4f}: pairs that do not fit it are not judged")
    if not yes and not typer.confirm("Start the calibration?", default=False):
        typer.echo("aborted; nothing was judged")
        raise typer.Exit(1)
    from judgeflow.run.account import account_limit, account_shapes

    if account_shapes(settings):  # the account limit lives in the Prefect API every process shares
        use_prefect(settings)
        account_limit(settings)
    if prefect:
        from judgeflow.run.entry import entered
        from judgeflow.flows.calibration import calibrate_judge

        with entered(settings):
            typer.echo(calibrate_judge(path, budget_usd=budget_usd, metrics=metrics))
        return
    from judgeflow.tasks.calibration import judge_labelled

    typer.echo(render(judge_labelled(settings, items, budget_usd), judge_model=settings.judge_model, source=path))
