"""How every judgeflow command reports failure: one clear line, exit code 2.

judgeflow's own errors are printed as they are, followed by the docs page
that explains that kind of error; a database error that escaped translation
is translated here, at the edge, without its traceback (which could carry
connection details)."""

from __future__ import annotations

import functools

import typer

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
    MetricError: "docs/metrics.md",  # the registered metrics and a metrics file's tables
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
