"""A flow run started by a command (``score``, ``backfill``, ``demo``): run
in the command's entry (its settings, and the judge it may have started
early), shown on the terminal, stopped by Ctrl-C."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import typer

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings

T = TypeVar("T")


@dataclass(frozen=True)
class Program:
    """What ``main()`` hands every command (click's context object): the
    ``judgeflow`` command is the program, so the process's garbage collector
    is judgeflow's to tune (judgeflow/infra/heap.py). A command that another
    program calls in its own process (a test's CliRunner) gets no Program:
    that heap is not judgeflow's."""

    owns_process: bool = True


def owns_process(ctx: typer.Context) -> bool:
    return isinstance(ctx.obj, Program) and ctx.obj.owns_process


def start_judge_early(settings: "Settings") -> Any:
    """The run's judge worker processes, started before Prefect is imported
    and the flow run created: their litellm import then runs beside that on
    another core instead of delaying the first judge call. None when the
    judge runs in this process (the run imports litellm itself) or is the
    offline one; any error is left for the run's start-judge task to report."""
    from judgeflow.judge.factory import build_judge, is_offline_model, judge_config

    if is_offline_model(settings.judge_model):
        return None
    try:
        config = judge_config(settings)
        if config.processes > 1:
            judge = build_judge(config)
            judge.start()
            return judge
    except Exception:  # noqa: BLE001 - reported by the run, with its context
        return None
    return None


def run_flow(ctx: typer.Context, title: str, settings: "Settings", call: Callable[[], T], *, judge: Any = None) -> T:
    """``call()`` (a flow call) in the command's entry, its run shown on the
    terminal and stopped by Ctrl-C (judgeflow/cli/console.py)."""
    from judgeflow.run.entry import StopRequest, entered
    from judgeflow.infra.prefect_server import ui_url_without_import
    from judgeflow.cli.console import EXIT_STOPPED, watched_run

    from judgeflow.run.account import account_limit

    account_limit(settings)  # JUDGEFLOW_JUDGE_RPM/TPM: created in Prefect now, or one line and exit 2
    if owns_process(ctx):  # the flow and its libraries are imported: the run's collections skip them
        from judgeflow.infra.heap import settle_heap

        settle_heap()
    try:
        stop = StopRequest()  # this run's: Ctrl-C sets it, the run's gate reads it
        with watched_run(title, stop, ui_url=ui_url_without_import(settings)) as display, \
                entered(settings, judge=judge, stop=stop, observer=display):
            return call()
    except KeyboardInterrupt:  # a second Ctrl-C: quit now
        typer.echo("quit: judge calls in flight are lost; the next run takes this run's claims over", err=True)
        raise typer.Exit(EXIT_STOPPED) from None
    finally:
        if judge is not None:  # the command started it: its worker processes end with the command's run
            judge.close()


def exit_if_stopped(summary) -> None:
    """Exit code 130 when Ctrl-C stopped the run (after its summary is printed)."""
    from judgeflow.cli.console import EXIT_STOPPED

    if summary.stopped:
        raise typer.Exit(EXIT_STOPPED)
