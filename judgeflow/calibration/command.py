"""`judgeflow calibrate`: read the labelled set, show the cost, ask, judge, print the report."""

from __future__ import annotations

import typer


def run_calibrate(*, path: str, prefect: bool, yes: bool, budget_usd: float | None, settings) -> None:
    from judgeflow.calibration.labelled import load_labelled, render
    from judgeflow.calibration.plan import plan_calibration
    from judgeflow.judge.pricing import require_prices

    items = load_labelled(path)  # a file it cannot read is a ConfigError: one line, exit 2
    if budget_usd is not None:
        require_prices(settings, why=f"a calibration budget of ${budget_usd:g} is set")
    plan = plan_calibration(settings, items)
    typer.echo(plan.describe())
    if budget_usd is not None:
        typer.echo(f"budget ${budget_usd:,.4f}: pairs that do not fit it are not judged")
    if not yes and not typer.confirm("Start the calibration?", default=False):
        typer.echo("aborted; nothing was judged")
        raise typer.Exit(1)
    if prefect:
        from judgeflow.run.entry import entered
        from judgeflow.flows.calibration import calibrate_judge

        with entered(settings):
            typer.echo(calibrate_judge(path, budget_usd=budget_usd))
        return
    from judgeflow.tasks.calibration import judge_labelled

    typer.echo(render(judge_labelled(settings, items, budget_usd), judge_model=settings.judge_model, source=path))
