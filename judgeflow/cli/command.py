"""What every command does around its work: build its settings, say which
database and Prefect server it uses, and set the terminal's log level."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from judgeflow.infra.prefect_server import LocalPrefectServer
    from judgeflow.config.settings import Settings


def command_settings(**overrides) -> "Settings":
    """The command's settings, built once: the environment's and ``.env``'s,
    with the command's options (those given, not None) on top; its metrics opened with them."""
    from judgeflow.run.metric_door import entry_settings

    return entry_settings(**{name: value for name, value in overrides.items() if value is not None})


def use_prefect(settings: "Settings") -> tuple[str, "LocalPrefectServer | None"]:
    """Before a command's first Prefect call: the configured Prefect server
    (PREFECT_API_URL), else judgeflow's local one, started on first use."""
    from judgeflow.infra.prefect_server import use_prefect as point_at_prefect

    url, local, started = point_at_prefect(settings)
    if local is not None:
        how = "started" if started else "running"
        typer.echo(f"prefect (local, {how}): {local.ui_url}  (`judgeflow stop` stops it)", err=True)
    return url, local


def announce_database(settings: "Settings") -> None:
    from judgeflow.db.engine import database_url, redact

    where = "embedded" if settings.uses_embedded_database else "configured"
    typer.echo(f"database ({where}): {redact(database_url(settings))}", err=True)


def quiet_unless(verbose: bool) -> None:
    """Warnings and errors only on the terminal unless -v; before Prefect is imported."""
    import logging

    from judgeflow.cli.console import set_log_level

    set_log_level(verbose)
    if verbose:
        # judgeflow's own INFO lines (the database connection's pool mode, each batch): the
        # root logger Prefect configures lets WARNING through only, and judgeflow's logger
        # has no level of its own
        logging.getLogger("judgeflow").setLevel(logging.INFO)


VERBOSE_HELP = "print every log line (each batch, each task run), not only warnings and errors"
