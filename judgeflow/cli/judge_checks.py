"""`judgeflow shadow` and `judgeflow calibrate`: how far a judge agrees with
the judge in force, or with human labels."""

from __future__ import annotations

from typing import Optional

import typer

from judgeflow.cli.command import command_settings, quiet_unless, use_prefect
from judgeflow.cli.errors import clear_errors


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
    metric: Optional[list[str]] = typer.Option(
        None, "--metric", help="a registered metric, repeatable (default: every one; `judgeflow status` lists them)"
    ),
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
    from judgeflow.shadow.command import run_shadow

    # the candidate's endpoint and key are settings of this one build, never flow parameters
    settings = command_settings(shadow_judge_api_base=judge_api_base, shadow_judge_api_key=judge_api_key)
    run_shadow(settings, judge_model=judge_model, size=size,
               segment_by=segment_by, since=since, metrics=metric, seed=seed, yes=yes, as_json=as_json,
               use_prefect=use_prefect)


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
) -> None:
    """Run the configured judge over human-labelled traces and report how well it agrees:
    Cohen's kappa, precision/recall/F1 at the configured thresholds, and the threshold
    that would agree best. Shows the estimated cost and asks first (--yes skips the question)."""
    from judgeflow.calibration.labelled import SAMPLE_PATH
    from judgeflow.calibration.command import run_calibrate

    if (path is None) == (not sample):
        raise typer.BadParameter("give FILE.jsonl or --sample (not both)")
    from judgeflow.config.settings import usd_budget

    run_calibrate(path=str(SAMPLE_PATH) if sample else path, prefect=prefect, yes=yes,
                  budget_usd=usd_budget("--budget-usd", budget_usd), settings=command_settings())
