"""`judgeflow score` as a process of its own: what it starts is its own and
ends with it, and it keeps the limits and signal dispositions it was started with."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.traces import insert_traces, results, scripted_trace

ADDRESS_SPACE_LIMIT = 8 * 2**30  # far above what a run needs; only its presence in the workers is checked


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> set[tuple[int, str]]:
    """Every process below ``pid`` (walking /proc), as (pid, start time): a pid
    the system reuses later is not the same process."""
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            stat = _stat(child)
            if stat is not None:
                found.add((child, stat[19]))
            todo.append(child)
    return found


def alive(process: tuple[int, str]) -> bool:
    stat = _stat(process[0])
    return stat is not None and stat[19] == process[1] and stat[0] != "Z"


def address_space_limit(pid: int) -> int | None:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max address space"):
            soft = line.split()[3]
            return None if soft == "unlimited" else int(soft)
    return None


def _as_started_by_a_user() -> None:
    """preexec_fn: SIGHUP ignored (as under nohup) and a memory limit (as ulimit -v)."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


def test_a_run_keeps_its_limits_and_signals_and_leaves_no_process_behind(
    judgeflow_env, db, prefect_server, judge_server
):
    judge_server.latency_mean_s = 0.1
    insert_traces(db, [scripted_trace(i)[0] for i in range(40)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env.update(judgeflow_env, PREFECT_API_URL=prefect_server, JUDGEFLOW_JUDGE_PROCESSES="2")
    proc = subprocess.Popen(
        [sys.executable, "-m", "judgeflow", "score", "--no-alerts", "--max-concurrency", "4", "--batch-size", "20"],
        env=env, cwd=os.getcwd(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group, as a terminal gives a command
        preexec_fn=_as_started_by_a_user,
    )
    seen: set[tuple[int, str]] = set()
    try:
        # mid-run: its judge workers are answering
        deadline = time.monotonic() + 180
        while judge_server.calls() < 20 and time.monotonic() < deadline and proc.poll() is None:
            seen |= descendants(proc.pid)
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be observed"
        seen |= descendants(proc.pid)
        workers = [pid for pid, _ in seen if alive((pid, _)) and pid not in _children().get(proc.pid, [])
                   and b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(workers) == 2, "the run should make its judge calls in two worker processes"
        # the memory limit the run was started with holds in its judge workers too
        assert {address_space_limit(pid) for pid in workers} == {ADDRESS_SPACE_LIMIT}

        # its terminal goes away: SIGHUP to the whole process group, ignored as the user asked
        os.killpg(proc.pid, signal.SIGHUP)
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= descendants(proc.pid)
            time.sleep(0.2)
        out = proc.communicate(timeout=240)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-3000:]
    stored = results(db)
    assert len(stored) == 80 and {r["status"] for r in stored.values()} == {"scored"}, out[-3000:]

    # nothing it started outlives it: the workers are gone when it exits, the fork
    # server and multiprocessing's resource tracker as soon as they see it gone
    assert len(seen) >= 3
    deadline = time.monotonic() + 30
    while any(alive(process) for process in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid, started in seen if alive((pid, started))]
    assert not left, f"processes started by `judgeflow score` still alive after it exited: {left}"
