"""How every judgeflow command reports failure: one clear line, exit code 2.

judgeflow's own errors are printed as they are, followed by the docs page
that explains that kind of error; a database error that escaped translation
is translated here, at the edge, without its traceback (which could carry
connection details)."""

from __future__ import annotations

import functools

import typer
from typer.core import TyperGroup

from judgeflow.errors import (
    ConfigError,
    DatabaseError,
    InvalidTraceError,
    JudgeAbstained,
    JudgeError,
    JudgeflowError,
    MetricError,
    PrefectServerError,
)

# The page under docs/ that explains each kind of error; the most specific
# class in the error's MRO wins (so every JudgeError subclass has a page).
DOCS_PAGES: dict[type[JudgeflowError], str] = {
    ConfigError: "docs/settings.md",  # every setting, its default and its rules
    # the registered metrics, plugins and a metrics file's tables: a problem of a file's metric found
    # by the settings (a segment key its source lacks) is a MetricError too (tests/cli/test_errors.py)
    MetricError: "docs/metrics.md",
    DatabaseError: "docs/running.md",  # connecting, `judgeflow db upgrade`, restarts
    PrefectServerError: "docs/running.md",  # the local Prefect server, PREFECT_API_URL
    InvalidTraceError: "docs/tables.md",  # the shape of a trace row
    JudgeAbstained: "docs/offline-judge.md",  # what the offline judge cannot check
    JudgeError: "docs/metrics.md",  # the judge, its retries and its replies
}


def docs_page(error: JudgeflowError) -> str | None:
    for cls in type(error).__mro__:
        if cls in DOCS_PAGES:
            return DOCS_PAGES[cls]
    return None


def error_line(error: JudgeflowError) -> str:
    """The one line a command prints for ``error``."""
    page = docs_page(error)
    return f"judgeflow: {error}" + (f" (see {page})" if page else "")


class OneLineUsageError(typer.BadParameter):
    """A misused command (an unknown option or command, a bad value, a missing argument) said in one line,
    with the command's help to read, as gh and kubectl do, in place of click's usage block; exit code 2.

    Typer vendors click and exports none of its usage errors but ``BadParameter`` (a usage error) and their
    root ``TyperException``: :class:`JudgeflowGroup` catches the root and keeps what exits 2."""

    def __init__(self, message: str, command: str):
        super().__init__(message)
        self.command = command

    def show(self, file=None) -> None:
        what = " ".join(self.message.split())  # a value's own message may hold a line break
        typer.echo(f"{self.command}: {what} (see `{self.command} --help`)", file=file, err=True)


_COMMAND = "judgeflow.command"  # ctx.meta (shared by a run's contexts): the command being parsed


def _one_line(error: typer.TyperException, ctx) -> typer.TyperException:
    if isinstance(error, OneLineUsageError) or error.exit_code != 2 or not hasattr(error, "ctx"):
        return error  # not a usage error
    if type(error).__name__ == "NoArgsIsHelpError":
        return error  # a bare `judgeflow db`: its help, as asked
    # an option's parser raises without the context it was parsing for: the command resolved last
    command = error.ctx.command_path if error.ctx is not None else ctx.meta.get(_COMMAND, ctx.command_path)
    return OneLineUsageError(error.format_message(), command)


class JudgeflowGroup(TyperGroup):
    """Every group of ``judgeflow``: a misuse beneath it, parsed in its own context or a command's, is one line."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except typer.TyperException as error:
            raise _one_line(error, parent or typer.Context(self, info_name=info_name)) from None

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            ctx.meta[_COMMAND] = f"{ctx.command_path} {command.name}"
        return name, command, rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except typer.TyperException as error:
            raise _one_line(error, ctx) from None


def clear_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from sqlalchemy.exc import SQLAlchemyError

        try:
            return fn(*args, **kwargs)
        except JudgeflowError as error:
            typer.secho(error_line(error), fg="red", err=True)
            raise typer.Exit(2)
        except SQLAlchemyError as error:
            message = getattr(error, "orig", None) or error
            typer.secho(error_line(DatabaseError(f"database error: {message}")), fg="red", err=True)
            raise typer.Exit(2)

    return wrapper
