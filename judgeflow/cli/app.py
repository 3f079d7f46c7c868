"""The ``judgeflow`` Typer application: every command, mounted from the module that holds it."""

from __future__ import annotations

import typer

from judgeflow.cli.alerts import alerts_app
from judgeflow.cli import demo, judge_checks, metrics, reports, results, scoring, servers
from judgeflow.cli.db import db_app
from judgeflow.cli.phoenix import phoenix_app
from judgeflow.cli.runs import Program

# click's own help layout (rich_markup_mode=None): it wraps at the terminal's width and never cuts a
# word, where rich's narrow help column cut setting names off (tests/cli/test_app.py)
app = typer.Typer(help="judgeflow: LLM-as-a-judge scoring of production traces.", no_args_is_help=True,
                  rich_markup_mode=None)
app.add_typer(db_app, name="db")
app.add_typer(alerts_app, name="alerts", help="Alert rules: current state, history, evaluate now.")
app.add_typer(phoenix_app, name="phoenix")


@app.command()
def version() -> None:
    """Print judgeflow's version."""
    from judgeflow import __version__

    typer.echo(__version__)


for command in (scoring.score, scoring.backfill, judge_checks.shadow, judge_checks.calibrate, servers.serve,
                reports.status, reports.report, reports.show, results.results, metrics.metrics, demo.demo,
                servers.ui, servers.stop):
    app.command()(command)


def main() -> None:  # pragma: no cover - console entry point
    """The ``judgeflow`` console script: the command is the program (:class:`Program`)."""
    from judgeflow.terminal_text import install
    from judgeflow.infra.heap import settle_heap

    # the process is judgeflow's: its collector too (judgeflow/infra/heap.py), from before any
    # library registers an exit handler, so the heap is frozen after they all ran
    settle_heap()

    install()  # every command's output: no control character from judge or trace text (judgeflow/terminal_text.py)
    app(prog_name="judgeflow", obj=Program())
