"""The plain-runtime benchmark (``python -m bench.run --case runtime``):
``judgeflow score`` as a fresh process, as a user or a scheduler starts it,
with a Prefect server already running (as in production).

* **the run**: 2,000 traces (``--traces``), both metrics, a judge with 200 ms
  +- 50 ms latency, 64 calls in flight (``--concurrency``), everything else
  at its defaults (judge processes: one per core, at most 4). Reported: the
  whole process's wall time against the ideal (judge calls x 200 ms / calls in
  flight), judge calls and prompt tokens per trace, the peak memory of the
  run's whole process tree (from /proc: the sum of RSS every 0.1 s, and of
  PSS, which counts pages the fork server's children share once, every 1 s), and
  every process of that tree still alive a moment after the run exited.
* **nothing to score**: ``judgeflow score`` on the same database again, and
  ``python -c "import prefect"``, alternately, wall and CPU time each.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.harness import (
    PY, JudgeProcess, Stack, calibrate_ms, finish_score, http_json, load_traces, proc_cpu_s, results_check, start_score,
)
from judgeflow.run.schedule import default_batch_size


def _child_pids(pid: int) -> list[int]:
    """``pid``'s children, from each of its threads' ``children`` file (the
    tree only, instead of reading every process on the machine)."""
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
            except OSError:
                continue
    except OSError:
        pass
    return found


def tree_of(pid: int) -> list[int]:
    found, todo = [pid], [pid]
    while todo:
        for child in _child_pids(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _rss_kb(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeSampler(threading.Thread):
    """Peak memory of a process tree, and every process seen in it.

    The sampler runs on the cores it measures, so it reads what is cheap
    (``statm``: RSS, ``stat``: CPU) every ``interval`` and PSS, which makes
    the kernel walk every page table (``smaps_rollup``), only every
    ``pss_interval``: every 0.1 s it would take seconds of the CPU it measures."""

    def __init__(self, pid: int, interval: float = 0.1, pss_interval: float = 1.0):
        super().__init__(daemon=True)
        self.pid, self.interval, self.pss_interval = pid, interval, pss_interval
        self.peak_rss_kb = self.peak_pss_kb = 0
        self.seen: set[int] = set()
        self.cpu_s: dict[int, float] = {}  # each descendant's own CPU, as last seen
        self.stop = threading.Event()

    def run(self) -> None:
        next_pss = 0.0
        while not self.stop.is_set():
            pids = tree_of(self.pid)
            self.seen.update(pids[1:])
            for p in pids[1:]:
                cpu = proc_cpu_s(p, with_children=False)
                if cpu:  # 0.0 once the process is gone: keep what was last seen
                    self.cpu_s[p] = cpu
            self.peak_rss_kb = max(self.peak_rss_kb, sum(_rss_kb(p) for p in pids))
            if time.monotonic() >= next_pss:
                next_pss = time.monotonic() + self.pss_interval
                self.peak_pss_kb = max(self.peak_pss_kb, sum(_pss_kb(p) for p in pids))
            self.stop.wait(self.interval)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass
class RuntimeResult:
    traces: int
    calls: int
    prompt_tokens: int
    wall_s: float
    flow_s: float
    ideal_s: float
    peak_rss_mb: float
    peak_pss_mb: float
    processes_seen: int
    alive_after_1s: int
    rows: dict
    cpu_s: float
    calibration_ms: float
    first_call_s: float  # from the command's start to the judge's first request
    window_s: float  # from the judge's first request to its last reply
    in_flight_mean: float  # calls in flight at the judge over that window
    judge_server_cpu_s: float
    prefect_server_cpu_s: float
    batch_size: int

    def row(self) -> dict[str, str]:
        return {
            "traces": str(self.traces), "judge calls": str(self.calls),
            "judge calls / trace": f"{self.calls / self.traces:.2f}",
            "prompt tokens / trace": f"{self.prompt_tokens / self.traces:.0f}",
            "whole process s": f"{self.wall_s:.1f}", "flow s": f"{self.flow_s:.1f}",
            "first judge call s": f"{self.first_call_s:.1f}", "judge window s": f"{self.window_s:.1f}",
            "calls in flight (mean)": f"{self.in_flight_mean:.1f}",
            "ideal s": f"{self.ideal_s:.1f}", "whole - ideal s": f"{self.wall_s - self.ideal_s:+.1f}",
            "vs deepeval 627.9 s": f"{627.9 / self.wall_s:.1f}x",
            "peak memory MB (RSS / PSS, whole tree)": f"{self.peak_rss_mb:.0f} / {self.peak_pss_mb:.0f}",
            "CPU s (run + children)": f"{self.cpu_s:.1f}",
            "CPU s judge server / Prefect server": f"{self.judge_server_cpu_s:.1f} / {self.prefect_server_cpu_s:.1f}",
            "batch size": str(self.batch_size),
            "processes started / alive 1 s after exit": f"{self.processes_seen} / {self.alive_after_1s}",
            "calibration ms": f"{self.calibration_ms:.0f}",
        }


def run_runtime(stack: Stack, *, traces: int, concurrency: int, out: Path) -> RuntimeResult:
    conninfo, url = stack.new_database("runtime")
    load_traces(conninfo, traces)
    stack.migrate(url)
    with JudgeProcess(latency_mean=0.2, latency_jitter=0.05) as judge:
        env = stack.score_env(url, judge.url, JUDGEFLOW_JUDGE_MODEL="openai/gpt-4o-mini")
        stack.prefect.wait_idle()
        calibration = calibrate_ms()
        prefect_pids = tree_of(stack.prefect.proc.pid)
        prefect_cpu = sum(proc_cpu_s(p, with_children=False) for p in prefect_pids)
        judge_cpu = judge.cpu_s()
        proc, handle, started = start_score(env, ["--max-concurrency", str(concurrency)], log=out / "runtime.log")
        sampler = TreeSampler(proc.pid)
        sampler.start()
        run = finish_score(proc, handle, started, out / "runtime.log")
        sampler.stop.set()
        sampler.join()
        prefect_cpu = sum(proc_cpu_s(p, with_children=False) for p in prefect_pids) - prefect_cpu
        judge_cpu = judge.cpu_s() - judge_cpu
        time.sleep(1.0)
        alive = [p for p in sampler.seen if _alive(p)]
        for pid in alive:  # what it is, to say why it outlived the run
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                print(f"alive 1 s after the run exited: {pid} ({state}) "
                      f"{Path(f'/proc/{pid}/cmdline').read_bytes().replace(bytes(1), b' ').decode()[:200]}")
            except OSError:
                pass
        stats = judge.stats()
        span = http_json(f"{judge.base}/in-flight?step=1")
    if run.returncode != 0:
        raise RuntimeError(f"judgeflow score failed:\n{run.output[-3000:]}")
    with psycopg.connect(conninfo) as conn:
        prompt_tokens = conn.execute("SELECT coalesce(sum(prompt_tokens), 0) FROM judgeflow.eval_results").fetchone()[0]
    calls = int(stats.get("requests", 0))
    return RuntimeResult(
        traces=run.figure("traces"), calls=calls, prompt_tokens=int(prompt_tokens), wall_s=run.wall_s,
        flow_s=run.duration_s or 0.0, ideal_s=calls * 0.2 / concurrency,
        peak_rss_mb=sampler.peak_rss_kb / 1024, peak_pss_mb=sampler.peak_pss_kb / 1024,
        processes_seen=len(sampler.seen), alive_after_1s=len(alive), rows=results_check(conninfo),
        cpu_s=run.cpu_user_s + run.cpu_sys_s + sum(sampler.cpu_s.values()),
        calibration_ms=(calibration + calibrate_ms()) / 2,
        first_call_s=span["first_at"] - started, window_s=span["last_at"] - span["first_at"],
        in_flight_mean=float(stats.get("mean_in_flight", 0.0)),
        judge_server_cpu_s=judge_cpu, prefect_server_cpu_s=prefect_cpu,
        batch_size=default_batch_size(concurrency),
    )


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children) of one command."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv} failed")
    return wall, usage.ru_utime + usage.ru_stime


def nothing_to_score(stack: Stack, *, repeat: int = 5) -> list[dict[str, str]]:
    """``judgeflow score`` with every trace scored already, against ``import prefect``."""
    conninfo, url = stack.new_database("nothing")
    load_traces(conninfo, 0)
    stack.migrate(url)
    env = stack.score_env(url, "http://127.0.0.1:9/v1")
    stack.home.mkdir(parents=True, exist_ok=True)
    figures: dict[str, list[tuple[float, float]]] = {"judgeflow score (nothing to score)": [],
                                                    'python -c "import prefect"': []}
    for _ in range(repeat):
        figures["judgeflow score (nothing to score)"].append(
            _timed([PY, "-m", "judgeflow", "score"], env, stack.home))
        figures['python -c "import prefect"'].append(_timed([PY, "-c", "import prefect"], env, stack.home))
    rows = []
    for name, runs in figures.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        rows.append({"command": name, "wall s (median, range)":
                     f"{statistics.median(walls):.2f} ({min(walls):.2f}-{max(walls):.2f})",
                     "CPU s (median)": f"{statistics.median(cpus):.2f}", "runs": str(repeat)})
    return rows
