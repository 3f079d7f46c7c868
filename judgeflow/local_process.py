"""Facts about the long-lived processes judgeflow starts under ``JUDGEFLOW_HOME``
(the local Prefect server, the judge host): whether a recorded pid is still
alive and still the process that was started there, not a reused pid."""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not reaped by its parent yet) is not alive
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def runs_in(pid: int, directory: Path) -> bool:
    """``pid`` is still the process started with ``directory`` as its working directory."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")).resolve() == directory.resolve()
    except OSError:
        return pid_alive(pid)
