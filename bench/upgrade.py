"""Upgrading a database of millions of results to the rollup while scoring goes on (issue 50):

    .venv/bin/python -m bench.upgrade [--rows 2000000] [--hours 6]

A private cluster holds a database at the revision before the rollup
(15_sample_ledger.py) with ``--rows`` result rows of two metrics spread over
the last 8 days, segments app x model (20 x 5), one judge epoch per metric.
The rows are synthetic, shaped like a run's (a reason of ~200 characters,
details, tokens, costs), bulk-loaded with the table's key and indexes built
after, as bench/rollup.py's ``--fast-build`` does (the table stays logged).

Then a writer stores results continuously: the results store's own upsert
statement (judgeflow/db/results_store.py), 20 rows (10 fresh traces x 2
metrics, trace times now) per transaction, every 50 ms. A real ``judgeflow
score`` is not used: it migrates the database to head itself when it starts.
While it writes, ``judgeflow db upgrade`` and then ``judgeflow db rollup``
run as an operator runs them; ``judgeflow db check`` runs before, during and
after the build.

Measured:

* the writer: the longest time between two successful writes and each
  transaction's latency (median, p99, max), overall and per phase;
* locks: PostgreSQL logs every lock wait longer than 100 ms
  (``log_lock_waits``, ``deadlock_timeout = 100ms``), and a sampler reads
  ``pg_locks`` / ``pg_stat_activity`` every 50 ms: every session seen waiting
  on a lock, on what, in which mode, and behind which statement;
* the wall times of the upgrade and of the rollup build, with the build's
  progress lines as they came.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import sqlalchemy as sa

from bench.harness import PY
from bench.rollup import _unindex
from judgeflow.db.embedded import EmbeddedPostgres

BEFORE_ROLLUP = "0015"  # 15_sample_ledger.py
CHUNK = 500_000
WRITE_EVERY_S = 0.05
TRACES_PER_WRITE = 10
METRICS = ("toxicity", "hallucination")
SOURCE = "table:public.llm_traces@results-db"
_REASON = ("The answer stays on the question and names no person; its tone is neutral and it neither insults "
           "nor threatens anyone. Nothing in it would offend a reader of the support channel it was sent to.")

# every session waiting for a lock, the lock, and the statements of the sessions it waits behind
_WAITS = """
    SELECT w.pid, coalesce(a.application_name, '') AS app, left(a.query, 100) AS query,
           w.locktype, w.mode, coalesce(w.relation::regclass::text, w.locktype) AS what,
           (SELECT string_agg(coalesce(b.application_name, '') || ': ' || left(b.query, 100), ' | ')
            FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(w.pid))) AS behind
    FROM pg_locks w JOIN pg_stat_activity a ON a.pid = w.pid
    WHERE NOT w.granted AND a.datname = current_database()
"""


class Writer(threading.Thread):
    """The results store's upsert, a small transaction every WRITE_EVERY_S."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        from judgeflow.db.results_store import _UPSERT

        self.upsert = _UPSERT
        self.engine = sa.create_engine(url, connect_args={"application_name": "scoring writer"})
        self.done = threading.Event()
        self.writes: list[tuple[float, float]] = []  # (started, committed), perf_counter
        self.errors: list[str] = []

    def run(self) -> None:
        i = 0
        with self.engine.connect() as conn:
            while not self.done.is_set():
                rows = [{"trace_id": f"live-{i}-{t}", "metric": m, "metric_version": "v1", "status": "scored",
                         "score": 0.1, "passed": True, "threshold": 0.5, "reason": _REASON,
                         "details": {"verdict": "no"}, "judge_model": "judge-test", "prompt_tokens": 420,
                         "completion_tokens": 60, "cost_usd": 0.0004, "latency_ms": 800.0, "judge_calls": 1,
                         "attempts": 1, "flow_run_id": "bench", "trace_created_at": _now_iso(),
                         "segment": {"app": f"app-{t % 20}", "model": f"model-{t % 5}"}, "content_hash": "h"}
                        for t in range(TRACES_PER_WRITE) for m in METRICS]
                t0 = time.perf_counter()
                try:
                    with conn.begin():
                        conn.execute(self.upsert, {"rows": json.dumps(rows), "source": SOURCE,
                                                   "rescore_before": None})
                    self.writes.append((t0, time.perf_counter()))
                except sa.exc.DBAPIError as exc:
                    self.errors.append(str(exc.orig).splitlines()[0])
                i += 1
                self.done.wait(WRITE_EVERY_S)
        self.engine.dispose()


def _now_iso() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat()


class LockSampler(threading.Thread):
    """Every lock wait seen in the database, sampled every 50 ms."""

    def __init__(self, conninfo: str):
        super().__init__(daemon=True)
        self.conninfo = conninfo
        self.done = threading.Event()
        self.samples: list[tuple[float, tuple]] = []
        self.rounds = 0
        self.slowest_round_s = 0.0

    def run(self) -> None:
        with psycopg.connect(self.conninfo, autocommit=True, application_name="lock sampler") as conn:
            while not self.done.is_set():
                t0 = time.perf_counter()
                for row in conn.execute(_WAITS):
                    self.samples.append((t0, tuple(row)))
                self.rounds += 1
                self.slowest_round_s = max(self.slowest_round_s, time.perf_counter() - t0)
                self.done.wait(0.05)

    def episodes(self) -> list[dict]:
        """Runs of consecutive samples of one session waiting on one lock, longest first."""
        current: dict[tuple, dict] = {}
        closed: list[dict] = []
        for at, (pid, app, query, _locktype, mode, what, behind) in self.samples:
            run = current.get((pid, what, mode))
            if run is None or at - run["last"] > 0.2:
                if run is not None:
                    closed.append(run)
                run = current[(pid, what, mode)] = {"first": at, "last": at, "app": app, "query": query,
                                                    "mode": mode, "what": what, "behind": behind or ""}
            run["last"] = at
        return sorted(closed + list(current.values()), key=lambda r: r["last"] - r["first"], reverse=True)


def _build(conninfo: str, rows: int) -> float:
    """``rows`` result rows over the last 8 days, key and indexes built after."""
    t0 = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for metric in METRICS:
            conn.execute("INSERT INTO judgeflow.judge_epochs (metric, metric_version, judge_model, started_at, source)"
                         " VALUES (%s, 'v1', 'judge-test', now() - interval '9 days', %s)", (metric, SOURCE))
        again = _unindex(conn)
        have, traces = 0, rows // len(METRICS)
        while have < traces:
            n = min(CHUNK // len(METRICS), traces - have)
            conn.execute(
                """
                INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed, threshold,
                    reason, details, judge_model, prompt_tokens, completion_tokens, cost_usd, latency_ms, judge_calls,
                    attempts, failed_runs, flow_run_id, scored_at, trace_created_at, segment, content_hash, source)
                SELECT 'old-' || g, m.metric, 'v1', 'scored', (g %% 100) / 100.0, g %% 100 >= 7, 0.5, %s,
                       jsonb_build_object('verdict', CASE WHEN g %% 100 >= 7 THEN 'no' ELSE 'yes' END),
                       'judge-test', 400 + g %% 50, 60, 0.0004, 800, 1, 1, 0, 'bench',
                       t.at + interval '5 minutes', t.at,
                       jsonb_build_object('app', 'app-' || (g %% 20), 'model', 'model-' || (g / 20 %% 5)),
                       md5(g::text), %s
                FROM generate_series(CAST(%s AS int), CAST(%s AS int)) g
                CROSS JOIN LATERAL (
                    SELECT now() - interval '8 days' * ((g::bigint * 7919 %% 1000003) / 1000003.0) AS at) t
                CROSS JOIN unnest(CAST(%s AS text[])) m(metric)
                """,
                (_REASON, SOURCE, have, have + n - 1, list(METRICS)),
            )
            have += n
            print(f"  {have * len(METRICS):,} rows ({time.perf_counter() - t0:.0f} s)", flush=True)
        conn.execute("SET maintenance_work_mem = '512MB'")
        for statement in again:
            conn.execute(statement)
        conn.execute("VACUUM ANALYZE judgeflow.eval_results")
        print(f"  key and {len(again) - 1} indexes built, vacuumed ({time.perf_counter() - t0:.0f} s)", flush=True)
    return time.perf_counter() - t0


def _command(env: dict[str, str], started: float, *args: str) -> tuple[float, float, list[str], int]:
    """Runs ``judgeflow ARGS``; (start, end) on the benchmark's clock, its lines as they came (stamped), exit code."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([PY, "-m", "judgeflow", *args], env=dict(env, PGAPPNAME=f"judgeflow {' '.join(args)}"),
                            cwd=env["JUDGEFLOW_HOME"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [f"[{time.perf_counter() - started:7.2f} s] {line.rstrip()}" for line in proc.stdout]
    return t0, time.perf_counter(), lines, proc.wait()


def _vacuum_lock(conninfo: str, seconds: float, phases: dict) -> None:
    """The lock a (long, anti-wraparound) VACUUM of the results holds, for ``seconds``: writers never
    wait for it, but a migration step that needs SHARE ROW EXCLUSIVE or stronger does."""
    with psycopg.connect(conninfo, application_name="vacuum stand-in") as conn:
        t0 = time.perf_counter()
        conn.execute("LOCK TABLE judgeflow.eval_results IN SHARE UPDATE EXCLUSIVE MODE")
        conn.execute("SELECT pg_sleep(%s)", (seconds,))
        conn.commit()
        phases["vacuum"] = (t0, time.perf_counter())


def _new_epoch(url: str, phases: dict) -> None:
    """A scoring run with a new judge model records its epoch (judgeflow/db/epochs.py), 10 s into the build."""
    from judgeflow.db.epochs import record_epochs

    time.sleep(10)
    engine = sa.create_engine(url, connect_args={"application_name": "epoch recorder"})
    t0 = time.perf_counter()
    with engine.begin() as conn:
        record_epochs(conn, SOURCE, {"toxicity": ("v1", "judge-new")})
    phases["new judge epoch"] = (t0, time.perf_counter())
    engine.dispose()


def _gaps(writes: list[tuple[float, float]], lo: float, hi: float) -> dict:
    """The writer's figures over commits in [lo, hi): longest time between two commits, latencies."""
    inside = [(s, e) for s, e in writes if lo <= e < hi]
    before = [e for _, e in writes if e < lo]
    ends = ([before[-1]] if before else []) + [e for _, e in inside]
    gaps = [(b - a, a) for a, b in zip(ends, ends[1:])]
    lat = sorted(e - s for s, e in inside)
    if not lat:
        return {"writes": 0}
    worst_gap, at = max(gaps) if gaps else (0.0, lo)
    return {"writes": len(inside), "max gap s": worst_gap, "gap at": at,
            "latency median ms": 1000 * statistics.median(lat), "p99 ms": 1000 * lat[int(0.99 * (len(lat) - 1))],
            "max ms": 1000 * lat[-1]}


def _lock_log(log_file: Path, start: int) -> list[str]:
    with open(log_file, errors="replace") as f:
        f.seek(start)
        return [line.rstrip() for line in f if "still waiting for" in line or "acquired" in line
                or "duration:" in line]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--hours", type=int, default=6, help="`judgeflow db rollup --hours` (trace hours per step)")
    parser.add_argument("--vacuum-lock", type=float, default=0.0, metavar="SECONDS",
                        help="from 1 s before the upgrade, a session holds the lock a VACUUM, ANALYZE or "
                             "CREATE INDEX CONCURRENTLY of the results holds (SHARE UPDATE EXCLUSIVE) this long")
    parser.add_argument("--epoch-during-build", action="store_true",
                        help="10 s into the rollup's build, a judge epoch is recorded (a run with a new judge model)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory (printed)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="judgeflow-upgrade-"))
    pg = EmbeddedPostgres(workdir / "pg")
    try:
        _run(pg, workdir, args)
    finally:
        pg.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _prepare(pg: EmbeddedPostgres, workdir: Path, rows: int) -> tuple[str, str, dict[str, str]]:
    """The cluster logging lock waits, the database at the revision before the rollup with ``rows``
    results; (conninfo, URL, the environment judgeflow's commands run in)."""
    from judgeflow.db import migrate
    from judgeflow.sources.table import CREATE_DEFAULT_TABLE

    pg.start()
    os.environ["PGPASSFILE"] = str(pg.password_file)
    conninfo = f"host=127.0.0.1 port={pg.port} user=judgeflow dbname=judgeflow"
    url = f"postgresql+psycopg://judgeflow@127.0.0.1:{pg.port}/judgeflow"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(CREATE_DEFAULT_TABLE)
        for key, value in (("log_lock_waits", "on"), ("deadlock_timeout", "100ms"),
                           ("log_min_duration_statement", "1000")):
            conn.execute(f"ALTER SYSTEM SET {key} = '{value}'")
        conn.execute("SELECT pg_reload_conf()")
        version = conn.execute("SHOW server_version").fetchone()[0]
    engine = sa.create_engine(url)
    migrate.upgrade(engine, BEFORE_ROLLUP)
    engine.dispose()
    print(f"# PostgreSQL {version}; building {rows:,} result rows at revision {BEFORE_ROLLUP}", flush=True)
    built = _build(conninfo, rows)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        mb = conn.execute("SELECT pg_total_relation_size('judgeflow.eval_results') / 1e6").fetchone()[0]
    print(f"# built in {built:.0f} s: results {mb:.0f} MB", flush=True)
    home = workdir / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUDGEFLOW_", "PREFECT_"))}
    env.update(JUDGEFLOW_DATABASE_URL=url, JUDGEFLOW_HOME=str(home), LITELLM_LOCAL_MODEL_COST_MAP="True",
               JUDGEFLOW_JUDGE_MODEL="openai/judge-test", JUDGEFLOW_JUDGE_API_BASE="http://127.0.0.1:9/v1",
               JUDGEFLOW_JUDGE_API_KEY="bench-key-not-secret", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    return conninfo, url, env


def _run(pg: EmbeddedPostgres, workdir: Path, args) -> None:
    conninfo, url, env = _prepare(pg, workdir, args.rows)
    log_start = pg.log_file.stat().st_size
    started = time.perf_counter()
    writer, sampler = Writer(url), LockSampler(conninfo)
    sampler.start()
    writer.start()
    phases: dict[str, tuple[float, float]] = {}
    outputs: dict[str, list[str]] = {}

    def run(name: str, *command: str) -> None:
        t0, t1, lines, code = _command(env, started, *command)
        phases[name], outputs[name] = (t0, t1), lines + ([f"(exit {code})"] if code else [])

    time.sleep(5)  # the writer alone first
    run("db check before", "db", "check")
    vacuum = threading.Thread(target=_vacuum_lock, args=(conninfo, args.vacuum_lock, phases))
    if args.vacuum_lock:
        vacuum.start()
        time.sleep(1)
    run("db upgrade", "db", "upgrade")
    if args.vacuum_lock:
        vacuum.join()
    time.sleep(3)
    checker = threading.Thread(target=lambda: (time.sleep(4), run("db check during build", "db", "check")))
    checker.start()
    epoch = threading.Thread(target=_new_epoch, args=(url, phases))
    if args.epoch_during_build:
        epoch.start()
    run("db rollup", "db", "rollup", "--hours", str(args.hours))
    checker.join()
    if args.epoch_during_build:
        epoch.join()
    run("db check after", "db", "check")
    time.sleep(3)
    writer.done.set()
    sampler.done.set()
    writer.join()
    sampler.join()
    end = time.perf_counter()
    _report(writer, sampler, phases, outputs, started, end, _lock_log(pg.log_file, log_start))


def _report(writer: Writer, sampler: LockSampler, phases: dict, outputs: dict, started: float, end: float,
            log: list[str]) -> None:
    if "new judge epoch" in phases:
        t0, t1 = phases["new judge epoch"]
        print(f"\n## a new judge epoch recorded: {t1 - t0:.1f} s (from {t0 - started:.1f} s)")
    if "vacuum" in phases:
        t0, t1 = phases["vacuum"]
        print(f"\n## SHARE UPDATE EXCLUSIVE on judgeflow.eval_results (a VACUUM's lock) held {t1 - t0:.1f} s "
              f"(from {t0 - started:.1f} s)")
    for name, lines in outputs.items():
        t0, t1 = phases[name]
        print(f"\n## {name}: {t1 - t0:.1f} s (from {t0 - started:.1f} s)")
        keep = lines if "check" not in name else [
            line for line in lines if "rollup" in line or "schema" in line or "window index" in line]
        for line in keep:
            print("   " + line)
    print("\n## the writer (a transaction of 20 rows every 50 ms)")
    spans = {"whole run": (started, end), **{k: v for k, v in phases.items() if "check" not in k}}
    if "new judge epoch" in phases:  # the writes just after it, the ones that queued behind it
        t0, t1 = phases["new judge epoch"]
        spans["new judge epoch"] = (t0, t1 + 1)
    for name, (lo, hi) in spans.items():
        figures = _gaps(writer.writes, lo, hi)
        shown = {k: (f"{v - started:.1f} s" if k == "gap at" else f"{v:.3f}" if isinstance(v, float) else v)
                 for k, v in figures.items()}
        print(f"   {name}: " + ", ".join(f"{k} {v}" for k, v in shown.items()))
    print(f"   errors: {len(writer.errors)} {writer.errors[:3]}")
    print(f"\n## lock waits sampled every 50 ms ({sampler.rounds} rounds, "
          f"slowest {sampler.slowest_round_s * 1000:.0f} ms)")
    for ep in sampler.episodes()[:12]:
        print(f"   {ep['last'] - ep['first']:.2f} s from {ep['first'] - started:.1f} s: {ep['app']!r} waits for "
              f"{ep['mode']} on {ep['what']} ({ep['query']!r}) behind {ep['behind']!r}")
    print(f"\n## PostgreSQL's log: lock waits over 100 ms, statements over 1 s ({len(log)} lines)")
    for line in log[:40]:
        print("   " + line[:400])


if __name__ == "__main__":
    main()
