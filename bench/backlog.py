"""Backlog cases: does selecting unscored traces stay fast, and memory flat,
as the source table grows (1k, 10k, 100k traces)?

Two shapes of backlog per size N:

* **pending**: N traces, none scored (a first run, or a long outage). The
  claim query's time per batch is measured at five positions of the cursor
  (start, 25%, 50%, 75%, end), with the real ``claim_traces`` code; its plan
  at the middle position is printed with ``EXPLAIN (ANALYZE, BUFFERS)``.
  Then ``judgeflow score --limit L`` scores a fixed number of traces with an
  instant judge: its flow time and peak RSS must not depend on N.
* **done**: N traces already scored plus 1,000 new ones at the end (the
  nightly steady state). What a run pays for the done history is the first
  claim batch (its index scan starts at the oldest trace) and the pending
  count at start; both are measured, and the run scores the 1,000 new traces.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from sqlalchemy import event

from bench.harness import JudgeProcess, Stack, load_traces, mark_scored, run_score

METRICS = ["toxicity", "hallucination"]
NEW_AFTER_DONE = 1000


@dataclass
class BacklogResult:
    size: int
    shape: str  # "pending" | "done"
    claim_ms: dict[str, float] = field(default_factory=dict)  # position -> median ms per batch
    count_ms: float = 0.0
    plan: str = ""
    plan_ms: float | None = None
    index_scan: str = ""
    scored: int = 0
    flow_s: float = 0.0
    maxrss_mb: float = 0.0

    def row(self) -> dict[str, str]:
        return {
            "source traces": f"{self.size:,}",
            "backlog": "all pending" if self.shape == "pending" else f"all scored + {NEW_AFTER_DONE:,} new",
            "claim ms/batch (start, 25%, 50%, 75%, end)": ", ".join(f"{v:.1f}" for v in self.claim_ms.values()),
            "claim SQL ms (EXPLAIN)": f"{self.plan_ms:.2f}" if self.plan_ms is not None else "-",
            "pending count ms": f"{self.count_ms:.0f}",
            "scored in run": str(self.scored),
            "flow s": f"{self.flow_s:.1f}",
            "peak RSS MB": f"{self.maxrss_mb:.0f}",
        }


def _settings(url: str):
    from judgeflow.config.settings import Settings

    return Settings(database_url=url, _env_file=None)


def _cursor_at(conninfo: str, position: int):
    from judgeflow.model import Cursor

    if position <= 0:
        return None
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(
            "SELECT created_at, id FROM llm_traces ORDER BY created_at, id OFFSET %s LIMIT 1", (position,)
        ).fetchone()
    return Cursor(created_at=row[0], trace_id=row[1], metric="toxicity")


def _time_claims(conninfo: str, url: str, cursor, repeat: int = 5) -> float:
    """Median ms of one 100-pair claim at ``cursor`` (claims deleted between tries)."""
    from judgeflow.tasks.claims import claim_traces

    settings = _settings(url)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        claim_traces.fn(settings, "bench-owner", METRICS, 100, cursor=cursor)
        times.append((time.perf_counter() - t0) * 1000)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("DELETE FROM judgeflow.claims WHERE owner = 'bench-owner'")
    return statistics.median(times)


def _explain_claim(conninfo: str, url: str, cursor) -> tuple[str, float | None]:
    """EXPLAIN (ANALYZE, BUFFERS) of exactly the statement claim_traces sends
    (captured from the engine), in a transaction rolled back afterwards."""
    from judgeflow.db.engine import engine_for
    from judgeflow.tasks.claims import claim_traces

    settings = _settings(url)
    engine = engine_for(settings)
    captured: list = []

    def grab(conn, cur, statement, parameters, context, executemany):
        if "INSERT INTO judgeflow.claims" in statement:
            captured.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", grab)
    try:
        claim_traces.fn(settings, "bench-owner", METRICS, 100, cursor=cursor)
    finally:
        event.remove(engine, "before_cursor_execute", grab)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("DELETE FROM judgeflow.claims WHERE owner = 'bench-owner'")
    statement, parameters = captured[-1]
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
        plan = "\n".join(r[0] for r in cur.fetchall())
    finally:
        raw.rollback()
        raw.close()
    ms = None
    for line in plan.splitlines():
        if line.strip().startswith("Execution Time:"):
            ms = float(line.split(":")[1].split()[0])
    return plan, ms


def _count_ms(url: str) -> float:
    from judgeflow.tasks.claims import count_pending_work

    t0 = time.perf_counter()
    count_pending_work.fn(_settings(url), METRICS)
    return (time.perf_counter() - t0) * 1000


def run_size(stack: Stack, size: int, shape: str, *, judge: JudgeProcess, out: Path, limit: int) -> BacklogResult:
    from judgeflow.db.engine import dispose_engines

    conninfo, url = stack.new_database(f"backlog_{shape}_{size}")
    total = size + (NEW_AFTER_DONE if shape == "done" else 0)
    load_traces(conninfo, total)
    stack.migrate(url)
    if shape == "done":
        mark_scored(conninfo, size)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    result = BacklogResult(size=size, shape=shape)
    if shape == "pending":
        positions = {"start": 0, "25%": size // 4, "50%": size // 2, "75%": 3 * size // 4, "end": size - 60}
    else:
        positions = {"first batch": 0}
    for label, position in positions.items():
        result.claim_ms[label] = _time_claims(conninfo, url, _cursor_at(conninfo, position))
    middle = _cursor_at(conninfo, size // 2) if shape == "pending" else None
    result.plan, result.plan_ms = _explain_claim(conninfo, url, middle)
    (out / f"backlog-{shape}-{size}.explain.txt").write_text(result.plan + "\n")
    result.index_scan = "; ".join(
        line.strip().split("  (")[0] for line in result.plan.splitlines() if "Index" in line and "Scan" in line
    )
    result.count_ms = _count_ms(url)
    dispose_engines()

    env = stack.score_env(url, judge.url, JUDGEFLOW_JUDGE_MODEL="openai/gpt-4o-mini")
    args = ["--max-concurrency", "8"]
    if shape == "pending":
        args += ["--limit", str(limit)]
    run = run_score(env, args, log=out / f"backlog-{shape}-{size}.log")
    if run.returncode != 0:
        raise RuntimeError(f"backlog {shape} {size}: judgeflow score failed:\n{run.output[-3000:]}")
    result.scored, result.flow_s, result.maxrss_mb = run.figure("traces"), run.duration_s or 0.0, run.maxrss_mb
    print(f"  backlog {shape} {size}: {result.row()}", flush=True)
    return result


def run_backlog(stack: Stack, sizes: list[int], *, out: Path, limit: int = 500) -> list[BacklogResult]:
    results = []
    with JudgeProcess() as judge:
        for shape in ("pending", "done"):
            for size in sizes:
                results.append(run_size(stack, size, shape, judge=judge, out=out, limit=limit))
    return results
