"""One account limit (issue 56): 1, 2 and 4 ``judgeflow score`` processes at once on one backlog,
under ``JUDGEFLOW_JUDGE_RPM``, against the local judge server enforcing the same limit (a 429 past
it, over a sliding 60 s window, as a provider does).

Reported per configuration: the calls the judge accepted and the 429s it answered (judgeflow's own
traffic: the goal is 0), requests per minute at the judge (fixed one-minute buckets from the first
request, and the most in any sliding 60 s), the judge's window (first to last request) against
calls / RPM (the goal: within 10%, start-up aside), the wall time (launch to the last exit,
start-up included), and of one process its CPU per judge call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.harness import JudgeProcess, Stack, finish_score, load_traces, start_score


@dataclass
class LimitRow:
    processes: int
    rpm: int
    account: dict
    wall_s: float
    cpu_s: float
    calls: int
    rows: int

    @property
    def window_s(self) -> float:
        return self.account["last_at"] - self.account["first_at"] if self.calls > 1 else 0.0

    @property
    def ideal_s(self) -> float:
        return self.calls / self.rpm * 60

    def row(self) -> dict[str, str]:
        a = self.account
        return {
            "processes": str(self.processes),
            "RPM": str(self.rpm),
            "calls at the judge": str(self.calls),
            "429s": str(a["refused"]),
            "requests per minute (buckets)": "/".join(map(str, a["per_minute"])),
            "most in any 60 s": str(a["max_60s"]),
            "judge window s": f"{self.window_s:.1f}",
            "calls / RPM s": f"{self.ideal_s:.1f}",
            "window vs calls/RPM": f"{self.window_s / self.ideal_s - 1:+.1%}" if self.ideal_s else "-",
            "wall s": f"{self.wall_s:.1f}",
            "CPU ms per call (all processes)": f"{1000 * self.cpu_s / max(self.calls, 1):.2f}",
            "results": str(self.rows),
        }


def _results(conninfo: str) -> int:
    import psycopg

    with psycopg.connect(conninfo) as conn:
        return conn.execute("SELECT count(*) FROM judgeflow.eval_results").fetchone()[0]


def run_account_limit(stack: Stack, *, out: Path, rpm: int = 600, traces: int = 460,
                      counts: tuple[int, ...] = (1, 2, 4), latency_s: float = 0.2, per_process: int = 8,
                      batch_size: int = 20) -> list[LimitRow]:
    """Each configuration on a backlog of its own (``traces``, about 3.25 judge calls each)."""
    rows = []
    for k in counts:
        conninfo, url = stack.new_database(f"account_limit_{k}")
        load_traces(conninfo, traces)
        stack.migrate(url)
        with JudgeProcess(latency_mean=latency_s, latency_jitter=latency_s / 4,
                          extra=("--rpm-limit", str(rpm))) as judge:
            env = stack.score_env(url, judge.url, JUDGEFLOW_JUDGE_RPM=str(rpm))
            args = ["--batch-size", str(batch_size), "--max-concurrency", str(per_process),
                    "--judge-processes", "1"]
            stack.prefect.wait_idle()
            started = [start_score(env, args, log=out / f"account-limit-{k}.{i}.log") for i in range(k)]
            runs = [finish_score(proc, handle, t0, out / f"account-limit-{k}.{i}.log")
                    for i, (proc, handle, t0) in enumerate(started)]
            stats = judge.stats()
        failed = [r.output[-2000:] for r in runs if r.returncode != 0]
        if failed:
            raise RuntimeError(f"a scoring process failed: {failed[0]}")
        account = stats["account"]
        rows.append(LimitRow(
            processes=k, rpm=rpm, account=account,
            wall_s=max(r.ended_at for r in runs) - min(r.started_at for r in runs),
            cpu_s=sum(r.cpu_user_s + r.cpu_sys_s for r in runs), calls=account["accepted"],
            rows=_results(conninfo)))
        print(f"  account limit, {k} process(es): {rows[-1].row()}", flush=True)
    return rows
