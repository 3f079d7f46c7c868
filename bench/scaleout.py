"""Scale-out: 1, 2 and 4 ``judgeflow score`` processes started at once on the
same backlog, against one Prefect API server and one PostgreSQL, with a
latency-bound judge (200 ms +- 50 ms, 8 calls in flight per process; the judge
server serves any number at once).

Each process is its own flow run claiming disjoint work through the claims
table, exactly as workers on a Prefect work pool would. Reported per
configuration: wall time (launch to the last process's exit, start-up
included), the scoring window (first to last result written), speed-ups
against one process, and the exactly-once check: rows per (trace, metric)
(the primary key allows one; all must be there) and first-step judge calls per
(trace, metric) from the judge server's request log (``/pair-calls``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.harness import Stack
from bench.throughput import Case, Result, run_case


@dataclass
class ScaleoutRow:
    result: Result
    base: Result | None

    def row(self) -> dict[str, str]:
        r, base = self.result, self.base or self.result
        k = r.case.processes
        pairs = 2 * r.case.traces
        written = r.rows.get("scored", 0) + r.rows.get("skipped", 0) + r.rows.get("failed", 0)
        per_run = [run.figure("traces") for run in r.runs]
        return {
            "processes": str(k),
            "traces per process": "/".join(map(str, per_run)),
            "wall s": f"{r.wall_s:.1f}",
            "speed-up (wall)": f"{base.wall_s / r.wall_s:.2f}x",
            "scoring window s": f"{r.window_s:.1f}",
            "speed-up (window)": f"{base.window_s / r.window_s:.2f}x",
            "ideal s": f"{r.ideal_s:.1f}",
            "ideal/window": f"{r.ideal_s / r.window_s:.0%}",
            "rows / pairs": f"{written}/{pairs}",
            "pairs judged twice": str(r.pair_calls.get("pairs_called_more_than_once")),
            "claims left": str(r.rows.get("claims_left")),
            "CPU s judgeflow/judge/pg/prefect/other": "/".join(
                f"{r.cpu.get(x, 0.0):.1f}" for x in ("judgeflow", "judge", "postgres", "prefect", "other")
            ),
        }


def run_scaleout(stack: Stack, *, out: Path, traces: int = 1600, counts: tuple[int, ...] = (1, 2, 4),
                 latency_s: float = 0.2, jitter_s: float = 0.05, per_process: int = 8,
                 batch_size: int = 20) -> list[ScaleoutRow]:
    rows: list[ScaleoutRow] = []
    base = None
    for k in counts:
        case = Case(name=f"scaleout-{k}", traces=traces, latency_s=latency_s, jitter_s=jitter_s,
                    concurrency=per_process, batch_size=batch_size, processes=k)
        result = run_case(stack, case, out=out, quiet=True)
        if base is None:
            base = result
        rows.append(ScaleoutRow(result, base))
        print(f"  scale-out {k}: {rows[-1].row()}", flush=True)
    return rows
