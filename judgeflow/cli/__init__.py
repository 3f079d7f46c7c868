"""The judgeflow command line (``judgeflow``, ``python -m judgeflow``).

One module per group of commands, each thin: a command builds its settings
once (:mod:`judgeflow.cli.command`), calls the modules that own the work and
prints what they return. Errors from judgeflow are printed as one clear line
(:mod:`judgeflow.cli.errors`).
"""

from judgeflow.cli.environment import apply_environment_defaults

apply_environment_defaults()  # before anything imports litellm or Prefect

from judgeflow.cli.app import app, main  # noqa: E402

__all__ = ["app", "main"]
