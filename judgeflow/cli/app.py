"""The ``judgeflow`` Typer application: every command, mounted from the module that holds it."""

from __future__ import annotations

import typer

from judgeflow.cli.alerts import alerts_app
from judgeflow.cli import demo, judge_checks, metrics, reports, results, scoring, servers
from judgeflow.cli.db import db_app
from judgeflow.cli.errors import JudgeflowGroup
from judgeflow.cli.labels import labels_app
from judgeflow.cli.phoenix import phoenix_app
from judgeflow.cli.runs import Program

# click's own help layout (rich_markup_mode=None): it wraps at the terminal's width and never cuts a
# word, where rich's narrow help column cut setting names off (tests/cli/test_app.py)
# misuse (an unknown option, a bad value, a missing argument) is one line, not click's usage block (JudgeflowGroup)
app = typer.Typer(help="judgeflow: LLM-as-a-judge scoring of production traces.", no_args_is_help=True,
                  rich_markup_mode=None, cls=JudgeflowGroup)
app.add_typer(db_app, name="db")
app.add_typer(alerts_app, name="alerts", help="Alert rules: current state, history, evaluate now.")
app.add_typer(phoenix_app, name="phoenix")
app.add_typer(labels_app, name="labels", short_help="Labels by people: sample, import, plan how many.")


@app.command()
def version() -> None:
    """Print judgeflow's version."""
    from judgeflow import __version__

    typer.echo(__version__)


# each command's line in `judgeflow --help`: click cuts a summary past the column (78 less the longest name
# and 6) with "...", so every one is written to fit (tests/cli/test_app.py); its --help says the rest
SUMMARIES = {
    scoring.score: "Score every trace without a result, once, now.",
    scoring.backfill: "Score (--rescore: re-score) every trace in a time range.",
    judge_checks.shadow: "Compare a candidate judge with the judge in force.",
    judge_checks.calibrate: "Measure how well the judge agrees with human labels.",
    servers.serve: "Run the nightly schedule and backfills in this process.",
    reports.status: "Results per metric, pending work, live runs.",
    reports.report: "Per-day not-passed rates per metric and segment.",
    reports.show: "One trace's results per metric, in full.",
    results.results: "Stored results, newest first, with filters.",
    metrics.metrics: "Every metric: origin, version, inputs, alert rules.",
    demo.demo: "The whole product on demo traces, nothing to set up.",
    servers.ui: "Print the Prefect UI's URL (starts the local server).",
    servers.stop: "Stop the local Prefect server and embedded PostgreSQL.",
}
for command, summary in SUMMARIES.items():
    app.command(short_help=summary)(command)


def main() -> None:  # pragma: no cover - console entry point
    """The ``judgeflow`` console script: the command is the program (:class:`Program`)."""
    from judgeflow.terminal_text import install
    from judgeflow.infra.heap import settle_heap

    # the process is judgeflow's: its collector too (judgeflow/infra/heap.py), from before any
    # library registers an exit handler, so the heap is frozen after they all ran
    settle_heap()

    install()  # every command's output: no control character from judge or trace text (judgeflow/terminal_text.py)
    app(prog_name="judgeflow", obj=Program())
