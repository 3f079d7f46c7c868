"""What every benchmark case shares.

* a private PostgreSQL cluster (:class:`~judgeflow.db.embedded.EmbeddedPostgres`
  in a temporary directory), one fresh database per case;
* one Prefect API server (``prefect server start``, sqlite, in the temporary
  directory), started once: its ~10 s start-up is never inside a measurement;
* the judge server (``python -m tests.support.judge_server``) as its own process
  per case, so its CPU is not the measured process's (on a 2-core machine they
  still share the cores: every case reports the CPU each process used);
* synthetic traces loaded with ``COPY``;
* ``judgeflow score`` run as a subprocess exactly as an operator runs it, timed
  from the outside (wall time, peak RSS and CPU from ``wait4``) and from the
  inside (the run summary's ``duration_s``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from judgeflow.sources.table import CREATE_DEFAULT_TABLE
from judgeflow.db.embedded import EmbeddedPostgres

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
BASE_TIME = datetime(2026, 1, 1, tzinfo=timezone.utc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, data: bytes | None = None, timeout: float = 10) -> dict:
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"{}")


# --------------------------------------------------------------------------
# CPU accounting of the helper processes (/proc)
# --------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on


def proc_cpu_s(pid: int, *, with_children: bool = True) -> float:
    """utime+stime (plus reaped children's when asked) of ``pid`` in seconds."""
    f = _stat(pid)
    if f is None:
        return 0.0
    ticks = int(f[11]) + int(f[12]) + ((int(f[13]) + int(f[14])) if with_children else 0)
    return ticks / CLK_TCK


def calibrate_ms(rounds: int = 3) -> float:
    """Milliseconds a fixed piece of pure-Python work takes now (the best of a
    few tries): the machine's speed at the moment. On a shared VM it varies
    (this one ran the same work 1.8x slower at times), and every figure with
    it; compare runs made at a similar calibration."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        acc = 0
        for i in range(100_000):
            acc += len(json.dumps({"i": i, "s": "x" * (i % 7)}))
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores, /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def tree_cpu_s(root: int) -> float:
    """CPU of ``root``, its reaped children and its live descendants (one level
    is enough for PostgreSQL: backends are children of the postmaster)."""
    total = proc_cpu_s(root)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        f = _stat(int(entry))
        if f is not None and int(f[1]) == root:
            total += proc_cpu_s(int(entry))
    return total


# --------------------------------------------------------------------------
# the helper servers
# --------------------------------------------------------------------------


class PrefectServer:
    """``prefect server start`` on a free port with its own sqlite database, or
    a PostgreSQL database (``database_url``: as docker/compose.yaml deploys it)."""

    def __init__(self, home: Path, database_url: str | None = None):
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        self.proc: subprocess.Popen | None = None
        self.database_url = database_url or f"sqlite+aiosqlite:///{self.home / 'prefect.db'}"

    def env(self) -> dict[str, str]:
        return {
            "PREFECT_HOME": str(self.home),
            "PREFECT_API_URL": self.url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": self.database_url,
        }

    def start(self, timeout: float = 120) -> "PrefectServer":
        self.home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env()}
        env.pop("PREFECT_API_URL")
        self.log = open(self.home / "server.log", "w")
        self.proc = subprocess.Popen(
            [str(Path(PY).parent / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(self.port),
             "--no-ui", "--analytics-off"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.home, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prefect server exited: {(self.home / 'server.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2)
                return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("prefect server did not start in time")

    def cpu_s(self) -> float:
        return tree_cpu_s(self.proc.pid) if self.proc else 0.0

    def wait_idle(self, timeout: float = 300) -> float:
        """Wait until the server has worked off its backlog (after a run with many
        task runs it persists their events for minutes); returns the seconds waited."""
        t0 = time.monotonic()
        last = self.cpu_s()
        while time.monotonic() - t0 < timeout:
            time.sleep(2)
            now = self.cpu_s()
            if now - last < 0.2:  # < 10% of a core
                break
            last = now
        return time.monotonic() - t0

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


class JudgeProcess:
    """The local OpenAI-compatible judge server as a separate process."""

    def __init__(self, *, latency_mean: float = 0.0, latency_jitter: float = 0.0,
                 faults: dict[str, float] | None = None, seed: int = 0, extra: tuple[str, ...] = ()):
        argv = [PY, "-m", "bench.judge_server", "--port", "0",
                "--latency-mean", str(latency_mean), "--latency-jitter", str(latency_jitter), "--seed", str(seed),
                *extra]
        for kind, rate in (faults or {}).items():
            argv += ["--fault", f"{kind}={rate}"]
        self.latency_mean = latency_mean
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            raise RuntimeError("judge server did not start")
        self.base = self.url.rsplit("/v1", 1)[0]

    def stats(self) -> dict:
        return http_json(f"{self.base}/stats")

    def reset(self) -> None:
        http_json(f"{self.base}/reset", data=b"")

    def cpu_s(self) -> float:
        return proc_cpu_s(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "JudgeProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------
# synthetic traces
# --------------------------------------------------------------------------

_FILLER = (
    " Fact: the order was placed through the web shop and paid by card."
    " Fact: delivery is expected within three working days."
    " Fact: the customer can track the parcel with the link in the confirmation e-mail."
)


def synthetic_output(i: int) -> str:
    """Outputs the judge server's rule responder understands (see
    ``tests.support.traces.scripted_trace``), ~350 characters each: toxicity
    costs 1 judge call (no opinions), 2 (opinions and verdicts: none toxic, so
    no reason call) or 3 (opinions, verdicts, reason), hallucination 1; 3.25
    calls per trace on average."""
    kind = i % 4
    if kind == 0:
        text = f"Fact: order {i} shipped on Monday. You are clueless [toxic]. The rest of trace {i} is fine."
    elif kind == 1:
        text = f"What a stupid question {i} [toxic]. Go away [toxic]!"
    elif kind == 2:
        text = f"Fact: the refund for case {i} was issued."
    else:
        text = f"Trace {i} looks good. I like this plan. It should work well?"
    halluc = (0.0, 0.25, 0.75, 1.0)[(i // 4) % 4]
    return text + _FILLER + f" Fact: marker [halluc={halluc}]."




def load_traces(conninfo: str, n: int, *, start: int = 0, base_time: datetime = BASE_TIME) -> float:
    """COPY ``n`` synthetic traces (ids ``b-<start>..``, one second apart) into
    ``llm_traces``; returns the seconds it took."""
    t0 = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(CREATE_DEFAULT_TABLE)
        with conn.cursor() as cur:
            with cur.copy("COPY llm_traces (id, created_at, input, output, context, metadata) FROM STDIN") as copy:
                for i in range(start, start + n):
                    context = json.dumps([f"context for trace {i}"]) if i % 2 else None
                    copy.write_row((f"b-{i:07d}", base_time + timedelta(seconds=i), f"question {i}",
                                    synthetic_output(i), context, '{"source": "bench"}'))
        conn.execute("ANALYZE llm_traces")
    return time.perf_counter() - t0


def mark_scored(conninfo: str, n: int, *, start: int = 0) -> None:
    """Pretend the first ``n`` traces were scored by an earlier run (both metrics)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed,
                threshold, judge_calls, attempts, flow_run_id, trace_created_at, scored_at)
            SELECT t.id, m.metric, 'bench', 'scored', 0, true, 0.5, 1, 1, 'earlier-run', t.created_at, now()
            FROM llm_traces t CROSS JOIN (VALUES ('toxicity'), ('hallucination')) AS m(metric)
            WHERE t.id >= %s AND t.id < %s
            """,
            (f"b-{start:07d}", f"b-{start + n:07d}"),
        )
        conn.execute("ANALYZE judgeflow.eval_results")


# --------------------------------------------------------------------------
# one measured `judgeflow score`
# --------------------------------------------------------------------------


@dataclass
class ScoreRun:
    returncode: int
    wall_s: float
    duration_s: float | None  # the flow's own figure (run summary)
    figures: dict[str, str]
    maxrss_mb: float
    cpu_user_s: float
    cpu_sys_s: float
    output: str
    started_at: float = 0.0  # time.monotonic() at start
    ended_at: float = 0.0
    rss_samples_mb: list[float] = field(default_factory=list)

    @property
    def cpu_s(self) -> float:
        return self.cpu_user_s + self.cpu_sys_s

    def figure(self, name: str, default: int = 0) -> int:
        try:
            return int(str(self.figures.get(name, default)).split()[0])
        except ValueError:
            return default


_ROW = re.compile(r"^\|\s*(?P<k>[^|]+?)\s*\|\s*(?P<v>[^|]*?)\s*\|$")


def parse_summary(text: str) -> dict[str, str]:
    figures: dict[str, str] = {}
    for line in text.splitlines():
        m = _ROW.match(line.strip())
        if m and m["k"] not in ("figure", "---"):
            figures[m["k"]] = m["v"]
    return figures


class Stack:
    """PostgreSQL + Prefect server in a temporary directory (see module doc)."""

    def __init__(self, workdir: Path | None = None, *, prefect_on_postgres: bool = False):
        # under /tmp: when run as root the cluster belongs to 'postgres', which must reach it
        self.dir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="judgeflow-bench-"))
        self.pg = EmbeddedPostgres(self.dir / "pg")
        self.prefect = PrefectServer(self.dir / "prefect")
        self.prefect_on_postgres = prefect_on_postgres  # the Prefect server's database: sqlite, or PostgreSQL
        self._dbs = 0

    def __enter__(self) -> "Stack":
        t0 = time.perf_counter()
        self.pg.start()
        # the cluster asks for its generated password: libpq (here, and in every
        # process the benchmark starts) reads it from the cluster's password file
        os.environ["PGPASSFILE"] = str(self.pg.password_file)
        if self.prefect_on_postgres:
            with psycopg.connect(self.admin_conninfo(), autocommit=True) as conn:
                conn.execute('CREATE DATABASE "prefect"')
            self.prefect.database_url = f"postgresql+asyncpg://judgeflow@127.0.0.1:{self.pg.port}/prefect"
        self.prefect.start()
        self.startup_s = time.perf_counter() - t0
        return self

    def __exit__(self, *exc) -> None:
        self.prefect.stop()
        self.pg.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def admin_conninfo(self, db: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.pg.port} user=judgeflow dbname={db}"

    def new_database(self, prefix: str = "bench") -> tuple[str, str]:
        """A fresh database: (libpq conninfo, SQLAlchemy URL)."""
        self._dbs += 1
        name = f"{prefix}_{self._dbs}"
        with psycopg.connect(self.admin_conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.admin_conninfo(name), f"postgresql+psycopg://judgeflow@127.0.0.1:{self.pg.port}/{name}"

    def migrate(self, url: str) -> None:
        import sqlalchemy as sa

        from judgeflow.db import migrate

        engine = sa.create_engine(url)
        try:
            migrate.upgrade(engine)
        finally:
            engine.dispose()

    def postmaster_pid(self) -> int:
        return int((self.pg.data_dir / "postmaster.pid").read_text().split()[0])

    def pg_cpu_s(self) -> float:
        return tree_cpu_s(self.postmaster_pid())

    @property
    def home(self) -> Path:
        return self.dir / "home"

    def score_env(self, db_url: str, judge_url: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUDGEFLOW_", "PREFECT_"))}
        env.update(self.prefect.env())
        env.update(
            JUDGEFLOW_DATABASE_URL=db_url,
            JUDGEFLOW_JUDGE_MODEL="openai/judge-test",
            JUDGEFLOW_JUDGE_API_BASE=judge_url,
            JUDGEFLOW_JUDGE_API_KEY="bench-key-not-secret",
            JUDGEFLOW_JUDGE_TIMEOUT_S="30",
            JUDGEFLOW_HOME=str(self.home),
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        # a metrics file given to the bench: its metrics are scored beside the built-ins (docs/benchmark.md)
        if os.environ.get("JUDGEFLOW_METRICS_FILE"):
            env["JUDGEFLOW_METRICS_FILE"] = os.environ["JUDGEFLOW_METRICS_FILE"]
        env.update(extra)
        return env


def start_score(env: dict[str, str], args: list[str], *, log: Path,
                wrap: list[str] | None = None) -> tuple[subprocess.Popen, object, float]:
    """Start ``judgeflow score --no-alerts ARGS`` (in JUDGEFLOW_HOME, so no stray
    .env is read), optionally under a profiler (``wrap``)."""
    home = Path(env["JUDGEFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    handle = open(log, "w")
    argv = [*(wrap or []), PY, "-m", "judgeflow", "score", "--no-alerts", *args]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=home, stdout=handle, stderr=subprocess.STDOUT)
    return proc, handle, started


class _RssPoller(threading.Thread):
    """Samples a process's RSS every ``interval`` seconds (for 'flat in the backlog size')."""

    def __init__(self, pid: int, interval: float = 0.25):
        super().__init__(daemon=True)
        self.pid, self.interval, self.samples = pid, interval, []
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.wait(self.interval):
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.samples.append(int(line.split()[1]) / 1024)
            except OSError:
                return

    def stop(self) -> None:
        self._stop_evt.set()


def finish_score(proc: subprocess.Popen, handle, started: float, log: Path,
                 poller: _RssPoller | None = None) -> ScoreRun:
    """Reap ``proc`` with wait4 (its own peak RSS and CPU) and parse its summary."""
    _, status, usage = os.wait4(proc.pid, 0)
    ended = time.monotonic()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if poller:
        poller.stop()
    handle.close()
    output = log.read_text(errors="replace")
    figures = parse_summary(output)
    duration = figures.get("duration (s)")
    return ScoreRun(
        returncode=proc.returncode, wall_s=ended - started,
        duration_s=float(duration) if duration else None, figures=figures,
        maxrss_mb=usage.ru_maxrss / 1024, cpu_user_s=usage.ru_utime, cpu_sys_s=usage.ru_stime,
        output=output, started_at=started, ended_at=ended,
        rss_samples_mb=poller.samples if poller else [],
    )


def run_score(env: dict[str, str], args: list[str], *, log: Path, wrap: list[str] | None = None,
              poll_rss: bool = False) -> ScoreRun:
    proc, handle, started = start_score(env, args, log=log, wrap=wrap)
    poller = None
    if poll_rss:
        poller = _RssPoller(proc.pid)
        poller.start()
    return finish_score(proc, handle, started, log, poller)


def results_check(conninfo: str) -> dict[str, int]:
    """Rows per status, and (trace, metric) pairs stored more than once (impossible
    by the primary key, counted anyway) or attempted more than once."""
    with psycopg.connect(conninfo) as conn:
        rows = dict(conn.execute("SELECT status, count(*) FROM judgeflow.eval_results GROUP BY status").fetchall())
        rows["claims_left"] = conn.execute("SELECT count(*) FROM judgeflow.claims").fetchone()[0]
        rows["flow_runs"] = conn.execute(
            "SELECT count(DISTINCT flow_run_id) FROM judgeflow.eval_results").fetchone()[0]
    return rows
