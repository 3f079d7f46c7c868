"""Suite-wide fixtures: a real PostgreSQL server, a real Prefect server
(judgeflow's local one, judgeflow/infra/prefect_server.py), and the local
OpenAI-compatible judge server."""

from __future__ import annotations

import logging
import os
import sys
import warnings

# before anything imports litellm or prefect
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "judgeflow")
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")

import pytest
import sqlalchemy as sa

from tests.support.postgres import create_database, drop_database, start_test_server
# LiteLLM's spend-log table and rows, for the litellm source preset's tests (tests/sources, tests/flows)
from tests.support.litellm_fixtures import litellm_db, litellm_template, spend_log_rows  # noqa: F401

# never let a developer's .env or shell leak into tests
for _key in [k for k in os.environ if k.startswith("JUDGEFLOW_")]:
    del os.environ[_key]

# the test process's metrics, opened once as an entry point does (built-ins and plugins, no metrics file):
# every Settings a test builds reads its metrics' settings from them
from judgeflow.run.metric_door import open_metrics  # noqa: E402

open_metrics()


# The files whose tests take the longest (minutes of a worker's time: `--durations`), most first.
# `./scripts/test` hands files to its workers whole (`--dist loadfile`) in the order collected
# (`--no-loadscope-reorder`; xdist's own order is by number of tests, which put these few-test
# files last, so one worker ran on alone after the others ended). Started first, they overlap
# the many short files. A file missing here is only scheduled later, never skipped. The order:
# the per-file times of the CI run of 2026-11-29 (batch nights 189 s, resilience 176, demo 125,
# scoring flow 100, rules 78, ...) less what the changes of that day took off them.
LONG_FILES = (
    "tests/flows/test_batch_night.py",
    "tests/flows/test_scoring_resilience.py",
    "tests/demo/test_demo_command.py",
    "tests/flows/test_scoring_flow.py",
    "tests/flows/test_scoring_rules.py",
    "tests/flows/test_sample_ledger.py",
    "tests/cli/test_console.py",
    "tests/judgeflow/test_terminal_output.py",
    "tests/run/test_account.py",
    "tests/cli/test_cli.py",
    "tests/db/test_rollup.py",
    "tests/infra/test_prefect_server.py",
    "tests/alerts/test_dead_event_local_server.py",
    "tests/flows/test_scoring_pgbouncer.py",
    "tests/alerts/test_webhook.py",
    "tests/deployments/test_prefect_yaml.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: files stay whole


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind(tmp_path_factory):
    """Whatever a test started under its tmp_path (a local Prefect server, an
    embedded PostgreSQL) and did not stop is stopped when the session ends,
    and reported: a test that leaves a process behind is a bug to fix."""
    import warnings

    from tests.support.processes import kill_processes_under

    base = tmp_path_factory.getbasetemp()
    yield
    left = kill_processes_under(base)
    if left:
        warnings.warn(f"the suite left {len(left)} process(es) running under {base}; stopped them: {left}")


class _LitellmAbandonedLoggingWorker(logging.Filter):
    """A test process calls litellm from several event loops that outlive the
    call (the judge loop's thread, then a test's own loop). On each change of
    loop litellm moves its logging worker's queue to the new loop and drops the
    old worker task, still pending, on the old one: collected later, asyncio
    logs "Task was destroyed but it is pending!", often after the suite's
    summary. A judgeflow process calls litellm from one loop only (the run's
    judge loop, a judge worker's loop), so this is the test process's alone.
    litellm's aiohttp transport leaves its connector's closing tasks on the old
    loop the same way. This filter on asyncio's logger drops that one message
    for those tasks (standard logging, nothing of litellm's touched); any other
    task destroyed pending is still logged."""

    # the tasks litellm leaves on a loop the test process no longer runs: its
    # logging worker's loop and log tasks, and its aiohttp connector's closers
    ABANDONED = ("LoggingWorker._worker_loop", "LoggingWorker._process_log_task", "aiohttp/connector.py")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("Task was destroyed but it is pending" in message
                    and any(task in message for task in self.ABANDONED))


logging.getLogger("asyncio").addFilter(_LitellmAbandonedLoggingWorker())

# The same tasks, when the interpreter exits with them still on a closed loop
# (a test worker process of pytest-xdist): their coroutines are collected
# unawaited, which Python reports as a RuntimeWarning or an unraisable
# exception. Dropped for those coroutines only.
warnings.filterwarnings("ignore", message=r"coroutine '(_wait_for_close|LoggingWorker\.\w+)' was never awaited",
                        category=RuntimeWarning)
_unraisable_hook = sys.unraisablehook


def _drop_abandoned_litellm_tasks(unraisable) -> None:
    if not any(task in repr(unraisable.object) for task in ("LoggingWorker.", "_wait_for_close")):
        _unraisable_hook(unraisable)


sys.unraisablehook = _drop_abandoned_litellm_tasks


@pytest.fixture(autouse=True)
def no_metrics_file_left_served():
    """A test that opens a metrics file in this process (a command through CliRunner, the demo in
    process) leaves that file's metrics served; a later test that builds settings on its own would
    meet metrics its settings lack. Each test ends with none served, as a new process starts."""
    yield
    from judgeflow.metrics.registry import served_file

    if served_file() is not None:
        open_metrics()


@pytest.fixture(scope="session")
def pg_server():
    server = start_test_server()
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def migrated_template(pg_server):
    """A database with judgeflow's schema at head and nothing else, made once:
    each test's database is a copy of it, so the migrations' own cost is paid
    once per session instead of once per test (the tests on
    ``empty_database_url`` still run them from an empty database)."""
    from judgeflow.db import migrate

    name, url = create_database(pg_server)
    engine = sa.create_engine(url)
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()  # a template must have no connection when it is copied
    yield name
    drop_database(pg_server, name)


def _fresh_database(pg_server, template: str | None):
    from judgeflow.db.engine import dispose_engines

    name, url = create_database(pg_server, template)
    yield url
    dispose_engines()
    drop_database(pg_server, name)


class _MigratedDatabases:
    """The copies of the migrated template the tests get, one each, made and dropped
    off the tests' path: a test's database was copied (on one thread) while the test
    before it ran, and it is dropped (on another) while the next one runs; a copy and a
    drop take 0.1-0.5 s on a busy 2-core machine, paid by ~330 tests a session. One copy
    is made ahead, no more; each test still gets a database no other test has touched.
    A copy made ahead that failed (a test restarted the server under it) is made again,
    here."""

    def __init__(self, pg_server, template: str):
        from concurrent.futures import ThreadPoolExecutor

        self._server, self._template = pg_server, template
        # two threads: a test that ends before the next copy is made waits for the copy alone
        self._copier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-database-copies")
        self._dropper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-database-drops")
        self._drops: list = []
        self._ahead = self._copy()

    def _copy(self):
        return self._copier.submit(create_database, self._server, self._template)

    def take(self) -> tuple[str, str]:
        ahead, self._ahead = self._ahead, None
        try:
            name, url = ahead.result()
        except Exception:  # noqa: BLE001 - the server was down or restarted meanwhile: copy it now
            name, url = create_database(self._server, self._template)
        self._ahead = self._copy()
        return name, url

    def give_back(self, name: str) -> None:
        self._drops.append(self._dropper.submit(drop_database, self._server, name))

    def close(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            try:
                self.give_back(ahead.result()[0])
            except Exception:  # noqa: BLE001 - never made: nothing to drop
                pass
        self._copier.shutdown(wait=True)
        self._dropper.shutdown(wait=True)
        failed = [repr(drop.exception()) for drop in self._drops if drop.exception() is not None]
        if failed:  # as a drop in the test's own teardown would have failed it: said, not lost
            warnings.warn(f"{len(failed)} test database(s) could not be dropped: {failed[:3]}")


@pytest.fixture(scope="session")
def migrated_databases(pg_server, migrated_template):
    databases = _MigratedDatabases(pg_server, migrated_template)
    yield databases
    databases.close()


@pytest.fixture
def database_url(migrated_databases):
    """A fresh database for one test, with judgeflow's schema at head (as
    every judgeflow command leaves it) and no rows."""
    from judgeflow.db.engine import dispose_engines

    name, url = migrated_databases.take()
    yield url
    dispose_engines()
    migrated_databases.give_back(name)


@pytest.fixture
def empty_database_url(pg_server):
    """A fresh, empty database: no judgeflow schema (migration tests)."""
    yield from _fresh_database(pg_server, None)


def _pgbouncer(pg_server, pool_mode: str, **options):
    from tests.support.pgbouncer import PgBouncer

    try:
        bouncer = PgBouncer(pg_server, pool_mode=pool_mode, **options).start()
    except RuntimeError as error:  # pgbouncer missing or broken: a failure that says so, never a skip
        pytest.fail(str(error), pytrace=False)
    yield bouncer
    bouncer.stop()


@pytest.fixture(scope="session")
def pgbouncer_transaction(pg_server):
    """PgBouncer in front of the test PostgreSQL, pool_mode = transaction, server
    connections closed after 3 s (server_lifetime) or 2 s idle (tests/support/pgbouncer.py)."""
    yield from _pgbouncer(pg_server, "transaction")


@pytest.fixture(scope="session")
def pgbouncer_round_robin(pg_server):
    """PgBouncer in transaction mode that hands idle server connections out in turn
    (server_round_robin = 1) instead of the one released last."""
    yield from _pgbouncer(pg_server, "transaction", server_round_robin=True)


@pytest.fixture(scope="session")
def pgbouncer_session(pg_server):
    """The same in pool_mode = session."""
    yield from _pgbouncer(pg_server, "session")


@pytest.fixture
def db(database_url):
    engine = sa.create_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def empty_db(empty_database_url):
    engine = sa.create_engine(empty_database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def prefect_server():
    """A real Prefect API server for the whole session: judgeflow's own local
    server (``prefect server start``, sqlite) in a temporary directory. Unlike
    prefect_test_harness, its start waits as long as a busy machine needs
    (polling its health check) instead of timing out after a fixed 90 s."""
    import shutil
    import tempfile
    from pathlib import Path

    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from judgeflow.infra.prefect_server import LocalPrefectServer

    base = Path(tempfile.mkdtemp(prefix="judgeflow-test-prefect-"))
    server = LocalPrefectServer(base)
    # the server stores received events every 5 s by default; alert deliveries wait
    # for that (an event is delivered once the API has it): the tests' server flushes often
    flush = "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL"
    before = os.environ.get(flush)
    os.environ[flush] = "0.5"
    try:
        try:
            url, _ = server.start(timeout_s=600)
        finally:
            if before is None:
                os.environ.pop(flush, None)
            else:
                os.environ[flush] = before
        # the server requires its auth string; subprocesses the tests start inherit it
        os.environ["PREFECT_API_AUTH_STRING"] = server.auth_string()
        with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_API_AUTH_STRING: server.auth_string()}):
            yield url
            # deliver the in-process runs' queued logs and events while the
            # server is still up: left for interpreter exit, they meet a stopped
            # server and Prefect prints "Error logging to API"
            from prefect.events.worker import EventsWorker
            from prefect.logging.handlers import APILogWorker

            APILogWorker.drain_all(timeout=30)
            EventsWorker.drain_all(timeout=30)
    finally:
        os.environ.pop("PREFECT_API_AUTH_STRING", None)
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def judge_server():
    from tests.support.judge_server import JudgeServer

    with JudgeServer() as server:
        yield server


@pytest.fixture
def judgeflow_env(monkeypatch, database_url, judge_server, tmp_path):
    """Environment for a judgeflow run against the test database and judge server."""
    env = {
        "JUDGEFLOW_DATABASE_URL": database_url,
        "JUDGEFLOW_JUDGE_MODEL": "openai/judge-test",
        "JUDGEFLOW_JUDGE_API_BASE": judge_server.url,
        "JUDGEFLOW_JUDGE_API_KEY": "test-key-not-secret",
        # longer than a run ever waits for its CPU: a run starved on a busy machine (or held with
        # SIGSTOP) past its judge timeout times out a call the server has answered and retries it,
        # and the pair reaches the judge twice, which the tests counting judge calls rightly refuse.
        # The tests of timeouts set their own.
        "JUDGEFLOW_JUDGE_TIMEOUT_S": "60",
        "JUDGEFLOW_JUDGE_BACKOFF_BASE_S": "0.05",
        "JUDGEFLOW_JUDGE_BACKOFF_MAX_S": "0.5",
        "JUDGEFLOW_TASK_RETRY_DELAY_S": "0.1",
        "JUDGEFLOW_HOME": str(tmp_path / "home"),
        # judge calls in the run's process: each judge worker process imports
        # litellm (~3 s of CPU); the tests of the default (one per core) opt out
        "JUDGEFLOW_JUDGE_PROCESSES": "1",
        # a batch run (--batch) against the judge server, whose batches end in a fraction of a second:
        # polled and sent at a test's pace, not a provider's (seconds to minutes)
        "JUDGEFLOW_JUDGE_BATCH_POLL_S": "0.2",
        "JUDGEFLOW_JUDGE_BATCH_POLL_MAX_S": "1",
        "JUDGEFLOW_JUDGE_BATCH_SETTLE_S": "0.3",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # no stray .env is read
    yield env
