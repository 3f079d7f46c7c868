"""What litellm alone allows on this machine: the judge calls of the peer case
(same count, same 200 ms +- 50 ms judge server, same calls in flight, prompts
of the same shape) made straight through judgeflow's judge, with nothing else
running: no Prefect, no database, no metrics, workers already started.

It says what litellm's CPU per call allows on these cores (the judge server
shares them, as in every case). All the calls are handed to the judge at
once, so a worker's calls beyond its share of the concurrency wait for a slot
by polling (1 ms growing to 50 ms); a scoring run bounds its pairs to the
concurrency instead.
Run with ``python -m bench.run --case ceiling``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bench.harness import JudgeProcess, proc_cpu_s


@dataclass
class Ceiling:
    processes: int
    calls: int
    concurrency: int
    wall_s: float
    ideal_s: float
    cpu_ms_per_call: float
    mean_in_flight: float

    def row(self) -> dict[str, str]:
        where = "in the calling process" if self.processes == 1 else f"{self.processes} judge processes"
        return {"judge calls made": where, "calls": str(self.calls),
                "calls in flight (mean)": f"{self.mean_in_flight:.1f} of {self.concurrency}",
                "wall s": f"{self.wall_s:.2f}", "ideal s": f"{self.ideal_s:.2f}",
                "ideal / wall": f"{self.ideal_s / self.wall_s:.0%}",
                "CPU ms per call": f"{self.cpu_ms_per_call:.2f}"}


def _requests(n: int):
    from judgeflow.judge.base import JudgeRequest
    from metrics.hallucination.schema import HallucinationJudgement
    from metrics.hallucination.template import hallucination_messages

    from bench.harness import synthetic_output

    return [JudgeRequest(step="hallucination", response_format=HallucinationJudgement,
                         messages=hallucination_messages(f"question {i}", synthetic_output(i), [f"context {i}"]),
                         fields={}) for i in range(n)]


def measure(processes: int, *, calls: int = 1400, concurrency: int = 64, latency_s: float = 0.2) -> Ceiling:
    from judgeflow.judge.factory import build_judge, judge_config
    from judgeflow.judge.pool.process_pool import JudgeProcessPool
    from judgeflow.config.settings import Settings

    with JudgeProcess(latency_mean=latency_s, latency_jitter=0.05) as judge_server:
        settings = Settings(_env_file=None, judge_model="openai/gpt-4o-mini", judge_api_base=judge_server.url,
                            judge_api_key="bench-key-not-secret", max_concurrency=concurrency,
                            judge_processes=processes)
        judge = build_judge(judge_config(settings))
        pool = judge if isinstance(judge, JudgeProcessPool) else None
        requests = _requests(calls)

        async def run(batch):
            return await asyncio.gather(*(judge.acomplete(r) for r in batch))

        asyncio.run(run(requests[:concurrency]))  # warm: imports done, connections open
        if pool:
            pool.wait_ready()
        judge_server.reset()
        pids = pool.worker_pids() if pool else []

        def cpu_s() -> float:  # of whichever processes make the calls
            return sum(proc_cpu_s(p) for p in pids) if pool else time.process_time()

        cpu_before = cpu_s()
        started = time.monotonic()
        asyncio.run(run(requests))
        wall = time.monotonic() - started
        cpu = cpu_s() - cpu_before
        stats = judge_server.stats()
        judge.close()
    return Ceiling(processes=processes, calls=calls, concurrency=concurrency, wall_s=wall,
                   ideal_s=calls * latency_s / concurrency, cpu_ms_per_call=cpu / calls * 1000,
                   mean_in_flight=float(stats.get("mean_in_flight", 0.0)))
