"""The ``judgeflow`` command's entry point.

``judgeflow score`` is handed to the judge host (:mod:`judgeflow.judge.host`)
when one is running for this ``JUDGEFLOW_HOME`` with the same code and is
ready for runs: it forks a process that already has Prefect, litellm and
judgeflow imported (``import prefect`` alone is ~1.4 s of CPU here, a sixth
of a 400-trace run), which runs the command with this process's environment,
working directory and standard streams, while this one passes signals on
and exits with its code. Anything else, or no such host, runs here as
before. Only a run that needs judge workers starts a host, so
``JUDGEFLOW_JUDGE_HOST=false`` keeps every command in its own process.

This module imports nearly nothing: it runs before every command.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The main job; other commands are short or interactive, and run here.
HANDED_TO_HOST = frozenset({"score"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})  # what pydantic reads as False


def _setting(name: str, default: str) -> str:
    """``JUDGEFLOW_<NAME>`` as the settings object reads it: the environment
    (any case), then ``.env`` in the working directory, then the default."""
    key = f"JUDGEFLOW_{name}".upper()
    for env_key, value in os.environ.items():
        if env_key.upper() == key:
            return value
    if os.path.isfile(".env"):
        from dotenv import dotenv_values

        for env_key, value in dotenv_values(".env").items():
            if env_key.upper() == key and value is not None:
                return value
    return default


def host_takes(argv: list[str]) -> bool:
    return bool(argv) and argv[0] in HANDED_TO_HOST and _setting("JUDGE_HOST", "true").strip().lower() not in _FALSE


def main() -> None:
    argv = sys.argv[1:]
    if host_takes(argv):
        from judgeflow.judge import host

        code = host.run_command(Path(_setting("HOME", ".judgeflow")), argv)
        if code is not None:
            sys.exit(code)
    from judgeflow.cli import app

    app(prog_name="judgeflow")


if __name__ == "__main__":  # pragma: no cover
    main()
