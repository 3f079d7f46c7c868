"""Throughput cases: ``judgeflow score`` over N synthetic traces against the
local judge server, one process (or several started at once).

Figures per case:

* **traces/s**: traces scored (both metrics written) / the flow's own
  ``duration_s`` (from its run summary: claims, judge calls, writes; not the
  process start-up, reported apart as wall time);
* **steady traces/s**: from the result rows' ``scored_at``, between the 10th
  and 90th percentile: the rate once litellm is imported and the pipeline full;
* **ideal s** = judge calls x mean latency / calls allowed in flight, and
  **ideal/flow** (the issue's target: >= 80% with a 200 ms judge);
* **mean in flight**: time-weighted, from the judge server;
* **peak RSS** of the scoring process (``wait4``; with judge processes, the
  largest of it and its workers), and the CPU seconds each process used (a
  scoring process's includes its judge workers'): on 2 cores the judge server, PostgreSQL and the Prefect server
  share the machine with the measured process.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bench.harness import (
    PY, JudgeProcess, ScoreRun, Stack, calibrate_ms, finish_score, load_traces, machine_busy_s, results_check,
    start_score,
)
from bench.profile import summarise

PY_SPY_ARGS = ["record", "--gil", "--nonblocking", "-r", "200", "-f", "raw"]


@dataclass
class Case:
    name: str
    traces: int
    latency_s: float = 0.0
    jitter_s: float = 0.0
    concurrency: int = 8
    batch_size: int = 100
    processes: int = 1
    judge_model: str = "openai/gpt-4o-mini"
    faults: dict[str, float] = field(default_factory=dict)
    fanout: str = "batch"  # the report's label: "batch" (judgeflow's task per batch), "default" (a peer's own)
    # judgeflow score --judge-processes: worker processes making the judge calls (None: its default)
    judge_processes: int | None = 1


@dataclass
class Result:
    case: Case
    runs: list[ScoreRun]
    stats: dict
    pair_calls: dict
    rows: dict
    steady_traces_per_s: float | None
    window_s: float | None  # first to last result written
    cpu: dict[str, float]
    calibration_ms: float = 0.0  # bench.harness.calibrate_ms() around the run: the machine's speed
    profile: str | None = None

    @property
    def traces(self) -> int:
        return sum(r.figure("traces") for r in self.runs)

    @property
    def flow_s(self) -> float:
        return max(r.duration_s or 0.0 for r in self.runs)

    @property
    def wall_s(self) -> float:
        return max(r.ended_at for r in self.runs) - min(r.started_at for r in self.runs)

    @property
    def calls(self) -> int:
        return int(self.stats.get("requests", 0))

    @property
    def ideal_s(self) -> float | None:
        if not self.case.latency_s:
            return None
        return self.calls * self.case.latency_s / (self.case.concurrency * self.case.processes)

    def row(self) -> dict[str, str]:
        c = self.case
        ideal = self.ideal_s
        return {
            "case": c.name,
            "fan-out": c.fanout + (f", {c.judge_processes} judge processes" if (c.judge_processes or 1) > 1 else ""),
            "traces": str(self.traces),
            "judge calls/trace": f"{self.calls / max(self.traces, 1):.2f}",
            "in flight max (mean)": f"{c.concurrency * c.processes} ({self.stats.get('mean_in_flight', 0):.1f})",
            "wall s": f"{self.wall_s:.1f}",
            "flow s": f"{self.flow_s:.1f}",
            "traces/s": f"{self.traces / self.flow_s:.1f}" if self.flow_s else "-",
            "steady traces/s": f"{self.steady_traces_per_s:.1f}" if self.steady_traces_per_s else "-",
            "ideal s": f"{ideal:.1f}" if ideal else "-",
            "ideal/flow": f"{ideal / self.flow_s:.0%}" if ideal and self.flow_s else "-",
            "judgeflow CPU ms/trace": f"{1000 * self.cpu['judgeflow'] / max(self.traces, 1):.1f}",
            "calibration ms": f"{self.calibration_ms:.0f}",
            "peak RSS MB": "/".join(f"{r.maxrss_mb:.0f}" for r in self.runs),
            "CPU s judgeflow/judge/pg/prefect/other": "/".join(
                f"{self.cpu.get(k, 0.0):.1f}" for k in ("judgeflow", "judge", "postgres", "prefect", "other")
            ),
        }


def steady_rate(conninfo: str) -> tuple[float | None, float | None]:
    """(traces/s between the 10th and 90th percentile of scored_at, seconds from
    the first to the last result written)."""
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(
            """
            SELECT count(*),
                   extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY scored_at)
                                  - percentile_disc(0.1) WITHIN GROUP (ORDER BY scored_at)),
                   extract(epoch FROM max(scored_at) - min(scored_at))
            FROM judgeflow.eval_results WHERE flow_run_id <> 'earlier-run'
            """
        ).fetchone()
    pairs, span, window = row
    if not pairs or not span:
        return None, float(window) if window else None
    return 0.8 * pairs / 2 / float(span), float(window)


def run_case(stack: Stack, case: Case, *, out: Path, profile: bool = False, quiet: bool = False) -> Result:
    conninfo, url = stack.new_database(case.name.replace("-", "_").replace(" ", "_")[:40])
    load_traces(conninfo, case.traces)
    stack.migrate(url)
    with JudgeProcess(latency_mean=case.latency_s, latency_jitter=case.jitter_s, faults=case.faults) as judge:
        env = stack.score_env(url, judge.url, JUDGEFLOW_JUDGE_MODEL=case.judge_model)
        args = ["--batch-size", str(case.batch_size), "--max-concurrency", str(case.concurrency)]
        if case.judge_processes is not None:
            args += ["--judge-processes", str(case.judge_processes)]
        stack.prefect.wait_idle()  # a previous case's events must not be processed during this one
        calibration = calibrate_ms()
        before = {"judge": judge.cpu_s(), "postgres": stack.pg_cpu_s(), "prefect": stack.prefect.cpu_s(),
                  "machine": machine_busy_s()}
        wrap, raw = None, None
        if profile:
            raw = out / f"{case.name}.pyspy.txt"
            wrap = [str(Path(PY).parent / "py-spy"), *PY_SPY_ARGS, "-o", str(raw), "--"]
        started = [start_score(env, args, log=out / f"{case.name}.{i}.log", wrap=wrap)
                   for i in range(case.processes)]
        runs = [finish_score(proc, handle, t0, out / f"{case.name}.{i}.log")
                for i, (proc, handle, t0) in enumerate(started)]
        time.sleep(0.3)  # let the judge server's counters settle
        stats = judge.stats()
        with urllib.request.urlopen(f"{judge.base}/pair-calls", timeout=10) as resp:
            pair_calls = json.loads(resp.read())
        with urllib.request.urlopen(f"{judge.base}/in-flight?step=0.25", timeout=10) as resp:
            (out / f"{case.name}.in-flight.json").write_bytes(resp.read())
        cpu = {
            "judgeflow": sum(r.cpu_s for r in runs),
            "judge": judge.cpu_s() - before["judge"],
            "postgres": stack.pg_cpu_s() - before["postgres"],
            "prefect": stack.prefect.cpu_s() - before["prefect"],
        }
        # whatever else ran on the machine meanwhile (other users' jobs): it competed for the cores
        cpu["other"] = max(0.0, machine_busy_s() - before["machine"]
                           - sum(cpu.values()))
    for i, run in enumerate(runs):
        if run.returncode != 0:
            raise RuntimeError(f"{case.name}: judgeflow score #{i} failed:\n{run.output[-3000:]}")
    steady, window = steady_rate(conninfo)
    result = Result(
        case=case, runs=runs, stats=stats, pair_calls=pair_calls, rows=results_check(conninfo),
        steady_traces_per_s=steady, window_s=window, cpu=cpu, calibration_ms=(calibration + calibrate_ms()) / 2,
        profile=summarise(raw) if raw and raw.exists() else None,
    )
    if not quiet:
        print(f"  {case.name}: {result.row()}", flush=True)
    return result
