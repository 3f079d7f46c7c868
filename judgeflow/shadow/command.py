"""`judgeflow shadow`: plan, show the cost, ask, run the shadow-score flow, print the report."""

from __future__ import annotations

import json

import typer


def run_shadow(
    settings, *, judge_model: str | None, size: int, segment_by: str | None,
    since: str, metrics: list[str] | None, seed: str, yes: bool, as_json: bool, use_prefect,
) -> None:
    from judgeflow.errors import ConfigError
    from judgeflow.shadow.plan import candidate_settings, plan_shadow
    from judgeflow.metrics.registry import metric_names
    from judgeflow.cli.timeparse import parse_when

    names = metric_names()
    chosen = list(dict.fromkeys(m.strip() for s in (metrics or list(names)) for m in s.split(",") if m.strip()))
    unknown = [m for m in chosen if m not in names]
    if unknown:
        raise ConfigError(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(names)}")
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
