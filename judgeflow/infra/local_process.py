"""Facts about the long-lived processes judgeflow starts under ``JUDGEFLOW_HOME``
(the local Prefect server): whether a recorded pid is still alive and still
the process that was started there, not a reused pid."""

from __future__ import annotations

import os
import signal
import time
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
    """``pid`` is still the process started with ``directory`` as its working
    directory: this user's, and there. A pid that cannot be read is not (another
    user's pid counts as alive, and pids are reused)."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.geteuid():
            return False
        return Path(os.readlink(f"/proc/{pid}/cwd")).resolve() == directory.resolve()
    except OSError:
        return False


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``pid`` to exit (reaping it if it is this
    process's child); returns whether it is gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours to reap
            pass
        if not pid_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def reap_exited(children: set[int]) -> None:
    """Reap the children of ``children`` that have exited (their CPU time then
    counts in this process's children) and drop them from the set."""
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.discard(pid)


def terminate(pid: int, timeout_s: float, *, kill_timeout_s: float, group: bool = False) -> None:
    """SIGTERM ``pid`` (its process group with ``group``: a process started in a
    session of its own takes its children along), wait up to ``timeout_s``, then
    SIGKILL it and wait up to ``kill_timeout_s``."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, kill_timeout_s)):
        if not _send(pid, sig, group):
            return
        if wait_gone(pid, wait_s):
            return


def _send(pid: int, sig: int, group: bool) -> bool:
    """Signal ``pid`` (or its group); False when it is gone."""
    if group:
        try:
            os.killpg(pid, sig)
            return True
        except (ProcessLookupError, PermissionError):  # not a group leader (any more): the process alone
            pass
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True
