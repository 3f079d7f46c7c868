"""`judgeflow demo`: the whole product on demo traces (judgeflow/demo/run.py)."""

from __future__ import annotations

import typer

from judgeflow.cli.command import VERBOSE_HELP, command_settings, quiet_unless, use_prefect
from judgeflow.cli.runs import exit_if_stopped, run_flow
from judgeflow.cli.errors import clear_errors


@clear_errors
def demo(
    ctx: typer.Context,
    reset: bool = typer.Option(False, "--reset", help="drop the demo's database and start over"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
) -> None:
    """Run the whole product on demo traces: embedded PostgreSQL, scoring flow, alerts, summary."""
    quiet_unless(verbose)
    import time

    from judgeflow.demo import run as demo_run
    from judgeflow.demo.report import build_report, render

    started = time.monotonic()
    settings = command_settings()
    if not settings.uses_embedded_database:
        typer.echo("demo: JUDGEFLOW_DATABASE_URL is set; the demo uses its own embedded database instead", err=True)
    settings, judge_note = demo_run.demo_settings(settings)
    if reset:
        demo_run.reset(settings)
        typer.echo(f"demo: the demo's database {settings.embedded_database} dropped", err=True)
    typer.echo(f"demo: judge = {judge_note}", err=True)
    typer.echo(f"demo: embedded PostgreSQL under {settings.home}, the demo's own database "
               f"{settings.embedded_database}", err=True)
    inserted = demo_run.load_traces(settings)
    typer.echo(f"demo: {inserted} new demo traces loaded into llm_traces", err=True)
    _, local = use_prefect(settings)

    from judgeflow.flows.scoring import score_new_traces
    from judgeflow.infra.prefect_server import configured_ui_url

    summary = run_flow(ctx, "demo", settings, lambda: score_new_traces(evaluate_alerts=True))
    ui_url = local.ui_url if local is not None else configured_ui_url()
    if summary.flow_run_id and not demo_run.wait_for_prefect_records(summary.flow_run_id):
        typer.echo("demo: Prefect's server is still recording the run's task runs; the UI will show them "
                   "in a moment", err=True)
    typer.echo(render(build_report(settings), judge_note=judge_note, ui_url=ui_url,
                      flow_run_id=summary.flow_run_id, ran_s=time.monotonic() - started))
    exit_if_stopped(summary)
