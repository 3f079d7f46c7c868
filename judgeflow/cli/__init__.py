"""The judgeflow command line (``judgeflow``, ``python -m judgeflow``).

One module per group of commands, each thin: a command builds its settings
once (:mod:`judgeflow.cli.command`), calls the modules that own the work and
prints what they return. Errors from judgeflow are printed as one clear line
(:mod:`judgeflow.cli.errors`).

The command tree (:mod:`judgeflow.cli.app`) is imported on first use, not
here: feature folders' own command modules (``judgeflow.alerts.cli``) import
this package's small helpers, and the tree imports them back.
"""

from typing import Any

from judgeflow.cli.environment import apply_environment_defaults

apply_environment_defaults()  # before anything imports litellm or Prefect

__all__ = ["app", "main"]


def main() -> None:
    from judgeflow.cli.app import main as run

    run()


def __getattr__(name: str) -> Any:
    if name == "app":
        from judgeflow.cli.app import app

        return app
    raise AttributeError(name)
