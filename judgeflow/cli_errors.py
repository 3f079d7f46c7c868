"""How every judgeflow command reports failure: one clear line, exit code 2.

judgeflow's own errors are printed as they are; a database error that
escaped translation is translated here, at the edge, without its traceback
(which could carry connection details)."""

from __future__ import annotations

import functools

import typer

from judgeflow.errors import DatabaseError, JudgeflowError


def clear_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from sqlalchemy.exc import SQLAlchemyError

        try:
            return fn(*args, **kwargs)
        except JudgeflowError as error:
            typer.secho(f"judgeflow: {error}", fg="red", err=True)
            raise typer.Exit(2)
        except SQLAlchemyError as error:
            message = getattr(error, "orig", None) or error
            typer.secho(f"judgeflow: {DatabaseError(f'database error: {message}')}", fg="red", err=True)
            raise typer.Exit(2)

    return wrapper
