"""Processes the suite left running: found by their working directory, which
for judgeflow's local Prefect server is ``<home>/prefect`` and for the
embedded PostgreSQL its data directory, both under a test's tmp_path."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def processes_under(root: Path) -> list[int]:
    """Live processes (not zombies) whose working directory is ``root`` or below it."""
    root = Path(root).resolve()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{entry}/cwd"))
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (cwd == root or root in cwd.parents):
            found.append(int(entry))
    return found


def describe(pid: int) -> str:
    try:
        return f"{pid} " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return str(pid)


def kill_processes_under(root: Path, timeout_s: float = 10.0) -> list[str]:
    """SIGTERM, then SIGKILL, every process under ``root``; returns what they were."""
    pids = processes_under(root)
    described = [describe(pid) for pid in pids]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and processes_under(root):
            time.sleep(0.2)
        if not processes_under(root):
            break
    return described
