"""`judgeflow phoenix sync`: the Phoenix write-back's outbox (judgeflow/phoenix/outbox.py), now."""

from __future__ import annotations

import typer

from judgeflow.cli.command import command_settings
from judgeflow.cli.errors import JudgeflowGroup, clear_errors

phoenix_app = typer.Typer(help="Arize Phoenix: write the scores Phoenix does not have yet.", no_args_is_help=True,
                          rich_markup_mode=None, cls=JudgeflowGroup)  # as the app's (judgeflow/cli/app.py)


@phoenix_app.command("sync", short_help="Write the scores Phoenix lacks as span annotations, now.")
@clear_errors
def sync(
    repair: bool = typer.Option(False, "--repair", help="also write again every score already written (Phoenix "
                                "lost an annotation) and those whose span Phoenix no longer held"),
) -> None:
    """Write every scored result of the configured Phoenix source that Phoenix does not have
    yet (turned on later, failed before, Phoenix down) as span annotations, whatever its
    backoff. Nothing is judged again. Exit code 1 when some are still unwritten; those
    whose span Phoenix no longer holds are final and do not count."""
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.db.result_sources import adopt_configured_source
    from judgeflow.errors import ConfigError
    from judgeflow.tasks.phoenix_write_back import write_back

    settings = command_settings()
    if settings.source != "phoenix":
        raise ConfigError("`judgeflow phoenix sync` writes the results of a Phoenix source: "
                          "set JUDGEFLOW_SOURCE=phoenix")
    engine = engine_for(settings)
    migrate.upgrade(engine)
    for note in adopt_configured_source(engine, settings).notes():
        typer.echo(note, err=True)
    if not settings.phoenix_write_back:
        typer.echo("JUDGEFLOW_PHOENIX_WRITE_BACK is off: runs do not write to Phoenix; this sync does, once", err=True)
    outcome = write_back(settings, everything=True, repair=repair)
    typer.echo(outcome.note)
    if outcome.left:
        raise typer.Exit(1)


def write_back_if_on(settings) -> None:
    """What `judgeflow score` does when nothing is pending: a run would have written
    the due scores Phoenix does not have yet, so they are written here."""
    if settings.source == "phoenix" and settings.phoenix_write_back:
        from judgeflow.tasks.phoenix_write_back import write_back

        typer.echo(write_back(settings).note)
