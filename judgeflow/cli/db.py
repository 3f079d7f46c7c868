"""`judgeflow db ...`: judgeflow's database: migrations, checks, the embedded server."""

from __future__ import annotations

import typer

from judgeflow.cli.command import announce_database, command_settings
from judgeflow.cli.errors import JudgeflowGroup, clear_errors

db_app = typer.Typer(help="judgeflow's database: migrations, checks, the embedded server.", no_args_is_help=True,
                     rich_markup_mode=None, cls=JudgeflowGroup)  # as the app's (judgeflow/cli/app.py)


@db_app.command("upgrade", short_help="Create or migrate judgeflow's tables (schema 'judgeflow').")
@clear_errors
def db_upgrade() -> None:
    """Create or migrate judgeflow's own tables (schema 'judgeflow')."""
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for

    from judgeflow.db.rollup import rollup_state

    settings = command_settings()
    announce_database(settings)
    engine = engine_for(settings)
    typer.echo(f"judgeflow schema at revision {migrate.upgrade(engine)}")
    with engine.connect() as conn:
        state = rollup_state(conn)
    if state is not None and not state.built:
        typer.echo(f"the result rollup holds results written from now on; {state.hours_left()} older trace hour(s) "
                   "are counted from the results until `judgeflow db rollup` builds them")


@db_app.command("check", short_help="Check the trace source and judgeflow's schema.")
@clear_errors
def db_check(
    full: bool = typer.Option(
        False, "--full", help="count unusable rows over the whole source (default: the window the next run reads)"
    ),
) -> None:
    """Check the trace source and judgeflow's schema; exit 1 if anything is missing."""
    from judgeflow.status.check import check_database

    settings = command_settings()
    announce_database(settings)
    report = check_database(settings, full=full)
    for line in report.lines():
        typer.echo(line)
    if not report.ok:
        raise typer.Exit(1)


@db_app.command("rollup", short_help="Build the result rollup for the hours it lacks.")
@clear_errors
def db_rollup(
    rebuild: bool = typer.Option(False, "--rebuild", help="recompute every hour from the results"),
    hours: int = typer.Option(6, "--hours", min=1, max=168, help="trace hours per transaction"),
) -> None:
    """Build the result rollup for the hours it does not hold yet (a database
    upgraded with results), a few hours per short transaction, then the window
    index with source and trace id (concurrently); scoring goes on."""
    from judgeflow.db import migrate, rollup
    from judgeflow.db.engine import engine_for
    from judgeflow.db.epochs import when

    settings = command_settings()
    announce_database(settings)
    engine = engine_for(settings)
    migrate.upgrade(engine)
    if rebuild:
        rollup.start_over(engine)

    def show(step: rollup.BuildProgress) -> None:
        if step.done:
            typer.echo("result rollup built: every trace hour is kept on write")
        else:
            typer.echo(f"built down to {when(step.built_from)} ({step.hours_done} hour(s), {step.lines} line(s)); "
                       f"{step.hours_left} hour(s) left")

    rollup.build(engine, hours=hours, progress=show)
    if rollup.cover_window_index(engine):
        typer.echo("window index rebuilt with source and trace id (concurrently): the cut hours are read index-only")


@db_app.command("fill-segments", short_help="Fill a segment key into past results, no judge call.")
@clear_errors
def db_fill_segments(
    keys: list[str] = typer.Argument(..., metavar="KEY", help="metadata keys to fill in, e.g. app"),
) -> None:
    """Fill segment keys into past results from the traces' metadata in the source, no judge call:
    for a key added to JUDGEFLOW_ALERT_SEGMENT_BY after its results were scored. A page of traces per
    transaction; stopped, run it again: it goes on with the results that still lack the key."""
    from judgeflow.alerts.segment_fill import fill_segment_key
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for

    settings = command_settings()
    announce_database(settings)
    migrate.upgrade(engine_for(settings))
    for key in dict.fromkeys(k.strip() for k in keys if k.strip()):
        if key not in settings.stored_segment_keys:
            typer.echo(f"{key} is not a segment key now (JUDGEFLOW_ALERT_SEGMENT_BY, a metric's segment_by): "
                       "results scored from now on will not carry it")
        done = fill_segment_key(settings, key, on_page=lambda d, key=key: typer.echo(d.line(key) + " ..."))
        typer.echo(done.line(key) + " (done)")


@db_app.command("start", short_help="Start the embedded PostgreSQL if it is not running.")
@clear_errors
def db_start() -> None:
    """Start the embedded PostgreSQL (under JUDGEFLOW_HOME) if it is not running."""
    from judgeflow.db.embedded import EmbeddedPostgres

    database = EmbeddedPostgres.for_settings(command_settings())
    database.start()
    typer.echo(f"{database.public_url} (password in {database.password_file})")


@db_app.command("stop")
@clear_errors
def db_stop() -> None:
    """Stop the embedded PostgreSQL."""
    from judgeflow.db.embedded import EmbeddedPostgres

    EmbeddedPostgres.for_settings(command_settings()).stop()
    typer.echo("embedded PostgreSQL stopped")
