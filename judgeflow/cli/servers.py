"""`judgeflow serve`, `ui` and `stop`: the long-running processes judgeflow
serves or keeps under JUDGEFLOW_HOME."""

from __future__ import annotations

from typing import Optional

import typer

from judgeflow.cli.command import announce_database, command_settings, use_prefect
from judgeflow.cli.errors import clear_errors


@clear_errors
def serve(
    timezone: Optional[str] = typer.Option(
        None, help="IANA timezone of the 02:00 schedule (default JUDGEFLOW_SCHEDULE_TIMEZONE, else UTC)"
    ),
    limit: Optional[int] = typer.Option(None, help="at most this many flow runs at once in this process"),
) -> None:
    """Run the nightly schedule (02:00) and the on-demand backfill in this process, without a work pool."""
    from judgeflow.cli.serve import serve as serve_deployments

    settings = command_settings()
    announce_database(settings)
    use_prefect(settings)
    serve_deployments(settings, timezone=timezone, limit=limit)


@clear_errors
def ui(
    open_browser: bool = typer.Option(False, "--open", help="also open it in the default web browser"),
) -> None:
    """Print the Prefect UI's URL (judgeflow's local Prefect server, started if needed)."""
    settings = command_settings()
    _, local = use_prefect(settings)
    if local is not None:
        url = local.ui_url
        typer.echo(f"the UI asks for an auth string: it is the line in {local.auth_file} (readable by your user "
                   "only); paste it whole", err=True)
    else:
        from judgeflow.infra.prefect_server import configured_ui_url

        url = configured_ui_url() or ""
        if not url:
            typer.echo("judgeflow: PREFECT_API_URL is set but Prefect knows no UI URL for it (PREFECT_UI_URL)",
                       err=True)
            raise typer.Exit(1)
    typer.echo(url)
    if open_browser:
        import webbrowser

        if not webbrowser.open(url):
            typer.echo("judgeflow: no web browser could be opened here; open the URL above", err=True)


@clear_errors
def stop() -> None:
    """Stop what judgeflow keeps running under JUDGEFLOW_HOME between commands: the local Prefect
    server and the embedded PostgreSQL."""
    from judgeflow.db.embedded import EmbeddedPostgres
    from judgeflow.infra.prefect_server import LocalPrefectServer

    settings = command_settings()
    if LocalPrefectServer.for_settings(settings).stop():
        typer.echo("Prefect's local server stopped")
    else:
        typer.echo("Prefect's local server was not running")
    database = EmbeddedPostgres.for_settings(settings)
    if database.is_initialised() and database.is_running():
        database.stop()
        typer.echo("embedded PostgreSQL stopped")
    else:
        typer.echo("embedded PostgreSQL was not running")
