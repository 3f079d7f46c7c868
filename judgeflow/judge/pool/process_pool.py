"""A judge whose calls run in worker processes (``JUDGEFLOW_JUDGE_PROCESSES``).

Why: litellm spends CPU on each call and Python runs it on one core, however
many threads or coroutines make the calls, so a fast judge with many calls in
flight needs more than one core of litellm alone (docs/benchmark.md). This
judge keeps the run's Prefect tasks, claims, metrics and writes in the run's process and
moves only the litellm calls into ``processes`` workers
(:func:`judgeflow.judge.pool.worker.serve`), each owning one
:class:`~judgeflow.judge.litellm_judge.LiteLLMJudge` and one event loop.

Built on :mod:`multiprocessing` alone: each worker is a
:class:`multiprocessing.Process` of a ``forkserver`` context (``spawn`` where
there is none) with two one-way :func:`multiprocessing.Pipe`\ s (requests,
replies) whose connections pickle requests, replies and errors. The fork server imports litellm once
(its preload) and forks every worker from there, so a run pays litellm's
import once, not once per worker.

Behaviour:

* **One bound.** ``max_concurrency`` is split between the workers
  (:meth:`~judgeflow.judge.config.JudgeConfig.shares`, the one split), each
  worker's judge holding its share on the wire, so the run never has more
  calls in flight than with one process. The run hands a worker its share
  plus a few calls it holds prepared
  (:meth:`~judgeflow.judge.config.JudgeConfig.dispatch_bound`), with slots of
  the same :class:`~judgeflow.judge.wire_slots.CallSlots` the judges hold: the
  other calls wait in the run, in the run's priority order, and the call's
  send gate (its pair may start, its claims) is asked as an attempt takes its
  slot, not when the pair starts. An attempt goes to the worker with the
  fewest outstanding, with its priority.
* **One retry loop, in the run.** A worker sends single attempts
  (:meth:`~judgeflow.judge.litellm_judge.LiteLLMJudge.attempt`); the run's
  :func:`~judgeflow.judge.retry.send_with_retries` decides whether and when
  the next one goes and counts what each cost, as for a judge in the run's
  process. What an attempt raised crosses back as the same
  :mod:`judgeflow.errors` class with its attributes.
* **A worker that dies** (killed, out of memory) fails the attempts it had
  with :class:`~judgeflow.errors.TransientJudgeError`, which the retry loop
  retries; the next attempt starts a new worker. A worker that exits
  :data:`MAX_FAILED_STARTS` times in a row before answering anything (a broken
  environment) is not started again: calls to it fail with
  :class:`~judgeflow.errors.PermanentJudgeError`.
* **Workers end with their run.** They are the run's descendants (the fork
  server is the run's child) and exit when they read EOF on their request pipe:
  when the pool is closed (:meth:`JudgeProcessPool.close`; at the latest at
  the interpreter's exit) or when the run's process is gone, killed included.
  They inherit the run's environment, limits and process group.

Nothing here imports litellm.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import multiprocessing
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any, Callable

from judgeflow.errors import CallWithheld, JudgeError, PermanentJudgeError, TransientJudgeError
from judgeflow.judge.base import JudgeBase, JudgeReply, JudgeRequest
from judgeflow.judge.retry import AttemptFailed, Pace, send_with_retries
from judgeflow.judge.send_gate import ANY_CALL, Call
from judgeflow.judge.spend import CallSpend
from judgeflow.judge.wire_slots import CallSlots
from judgeflow.judge.pool.worker import HELLO, decode_error, decode_failure, encode_error, serve

if TYPE_CHECKING:
    from judgeflow.judge.config import JudgeConfig

log = logging.getLogger("judgeflow.judge")

__all__ = ["JudgeProcessPool", "encode_error", "decode_error"]

_CLOSE_WAIT_S = 10.0
MAX_FAILED_STARTS = 3  # workers in a row that died before answering anything
# imported once by the fork server, before it forks any worker: the judge, its
# heap then frozen (judgeflow/judge/pool/fork_server.py), and the program's main
# module, which multiprocessing otherwise imports in every worker
# (multiprocessing's "safe importing of main module" applies)
_PRELOAD = ["__main__", "judgeflow.judge.pool.fork_server"]


def _context() -> multiprocessing.context.BaseContext:
    """The start method: a fork server where the platform has one (each worker
    forked from a process that has imported litellm once), else spawn. Never a
    plain fork of the run's process, which holds threads, an event loop and
    the connections of every other worker."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_PRELOAD)
        return context
    return multiprocessing.get_context("spawn")


def _resolve(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete ``future`` (concurrent or asyncio, on its loop's thread) unless
    its caller already gave up on it (cancelled)."""
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except (InvalidStateError, asyncio.InvalidStateError):  # cancelled between the check and now
        pass


def _resolve_all(outcomes: list[tuple[Any, Any, BaseException | None]]) -> None:
    for future, result, error in outcomes:
        _resolve(future, result, error)


def _resolve_waiters(outcomes: list[tuple[tuple[Any, Any], Any, BaseException | None]]) -> None:
    """Resolve ``((loop, future), result, error)`` items from any thread: a
    concurrent future (``loop`` None) at once, the asyncio futures of one loop
    in one callback on that loop (one wake-up per loop, not one per call)."""
    by_loop: dict[Any, list] = {}
    for (loop, future), result, error in outcomes:
        if loop is None:
            _resolve(future, result, error)
        else:
            by_loop.setdefault(loop, []).append((future, result, error))
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve_all, items)
        except RuntimeError:  # the loop is closed: nobody awaits these any more
            pass


class _Worker:
    """One worker slot: its current process, restarted on the next call after it died."""

    def __init__(self, index: int, config: "JudgeConfig", target: Callable) -> None:
        self.index = index
        self._config = config
        self._target = target
        self._lock = threading.Lock()  # guards the process and the pending map; never held during I/O
        self._send_lock = threading.Lock()  # one message at a time on the request pipe
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._conn: Any = None
        # calls sent to the current process; each process's reader owns its own
        # map, so a call can never wait on a process that is already gone
        self._pending: dict[int, tuple[Any, Any]] = {}  # call id -> (its loop or None, its future)
        self.queued = 0  # calls picked for this slot, not yet sent (the pool's lock guards it)
        self._pid: int | None = None  # from the worker's hello: it can take calls
        # from the hello: what an attempt without usage costs, per model it may ask
        self.prices: dict[str, tuple[float, float] | None] = {}
        self.calls = 0  # calls sent over this slot's lifetime (tests, benchmark)
        self.starts = 0
        self.failed_starts = 0  # processes in a row that exited without answering anything
        self._last_exit: int | None = None
        self._closed = False  # hung up: no process is started again

    @property
    def outstanding(self) -> int:
        return len(self._pending) + self.queued

    @property
    def pid(self) -> int | None:
        """The worker's pid once it has said hello, while it runs."""
        return self._pid if self._proc is not None else None

    def _start(self) -> None:
        """Start a worker process (the caller holds the lock)."""
        context = _context()
        requests_in, requests_out = context.Pipe(duplex=False)
        replies_in, replies_out = context.Pipe(duplex=False)
        proc = context.Process(target=self._target, args=(requests_in, replies_out, self._config),
                               name=f"judgeflow-judge-worker-{self.index}", daemon=True)
        try:
            proc.start()
        finally:
            requests_in.close()  # the worker holds these ends: its exit is EOF on replies_in
            replies_out.close()
        self.starts += 1
        self._proc, self._conn, self._pending, self._pid = proc, requests_out, {}, None
        threading.Thread(target=self._read_replies, args=(proc, replies_in, self._pending),
                         name=f"judgeflow-judge-worker-{self.index}", daemon=True).start()

    def ensure_started(self) -> None:
        with self._lock:
            if self._proc is None and not self._closed:
                self._start()

    def send(self, calls: list[tuple[int, JudgeRequest, tuple[Any, Any]]]) -> None:
        """Send ``(call id, request, (loop or None, future))`` calls as one message.

        The write happens outside ``_lock``: a message larger than the pipe's
        buffer waits for the worker to read it, and the worker may itself be
        waiting for this process's reader (which takes ``_lock``) to read its
        replies. ``_send_lock`` keeps two senders' messages apart."""
        failed: BaseException | None = None
        with self._lock:
            if self._closed:
                failed = PermanentJudgeError("the judge process pool is closed")
            elif self.failed_starts >= MAX_FAILED_STARTS:
                # a worker that cannot start (broken environment) is not retried forever
                failed = PermanentJudgeError(
                    f"judge worker {self.index} failed to start {self.failed_starts} times in a row "
                    f"(last exit code {self._last_exit}); see the run's log for its error"
                )
            else:
                self.calls += len(calls)
                try:
                    if self._proc is None:
                        self._start()
                except (OSError, ValueError) as exc:
                    failed = TransientJudgeError(f"judge worker {self.index} could not start: {exc}")
                else:
                    pending, conn = self._pending, self._conn
                    for call_id, _, waiter in calls:
                        pending[call_id] = waiter
        if failed is None:
            try:
                with self._send_lock:
                    conn.send([(call_id, request) for call_id, request, _ in calls])
            except (OSError, ValueError) as exc:  # the worker died under us, or the pool hung up
                with self._lock:
                    for call_id, _, _ in calls:
                        pending.pop(call_id, None)  # those its reader already failed are gone
                failed = TransientJudgeError(f"judge worker {self.index} is gone: {exc}")
        if failed is not None:
            _resolve_waiters([(waiter, None, failed) for _, _, waiter in calls])

    def _read_replies(self, proc, conn, pending: dict[int, tuple[Any, Any]]) -> None:
        answered = False
        try:
            while True:
                replies = conn.recv()  # the replies a worker finished together
                outcomes = []
                with self._lock:
                    for call_id, ok, payload in replies:
                        waiter = pending.pop(call_id, None)
                        if not answered:
                            self.failed_starts = 0
                            answered = True
                        if call_id == HELLO and self._proc is proc:
                            self._pid, self.prices = payload
                        if waiter is None:  # the hello
                            continue
                        outcomes.append((waiter, payload if ok else decode_failure(payload), None))
                _resolve_waiters(outcomes)
        except (EOFError, OSError, ValueError):
            pass
        proc.join(_CLOSE_WAIT_S)
        code = proc.exitcode
        conn.close()
        with self._lock:
            lost = list(pending.values())
            pending.clear()
            if self._proc is proc:
                self._proc, self._conn, self._pid = None, None, None
            if not answered and code != 0:
                self.failed_starts += 1
                self._last_exit = code
        if lost:
            log.warning("judge worker %d exited (code %s) with %d call(s) in flight; they will be retried",
                        self.index, code, len(lost))
        error = TransientJudgeError(f"judge worker {self.index} exited (code {code})")
        _resolve_waiters([(waiter, None, error) for waiter in lost])

    def hang_up(self):
        """Close the worker's request pipe (it exits when it reads EOF);
        returns its process for :meth:`wait_closed`."""
        with self._lock:
            proc, conn = self._proc, self._conn
            self._proc, self._conn, self._pid = None, None, None
            self._closed = True
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
        return proc

    @staticmethod
    def wait_closed(proc) -> None:
        if proc is None:
            return
        proc.join(_CLOSE_WAIT_S)
        if proc.exitcode is None:
            proc.kill()
            proc.join()


class JudgeProcessPool(JudgeBase):
    """A :class:`~judgeflow.judge.base.Judge` that sends each call to one of
    ``processes`` worker processes (see the module doc). Workers start together
    on the first call (or :meth:`start`). ``target`` is the function a worker
    runs (:func:`judgeflow.judge.pool.worker.serve`; tests give one that fails)."""

    def __init__(self, config: "JudgeConfig", *, target: Callable = serve, pace: Pace | None = None) -> None:
        super().__init__()
        self._model = config.model
        self.retry = config.retry
        self._pace = pace or Pace()  # the backoff's randomness and the Retry-After cool-down, run-wide
        self._prices = config.prices_per_mtok
        self.max_concurrency = config.max_concurrency
        self._workers = [_Worker(i, share, target) for i, share in enumerate(config.shares())]
        # the calls handed to the workers (the module doc); each worker's judge bounds its share on the wire
        self._slots = CallSlots(config.dispatch_bound())
        self._ids = itertools.count()
        self._dispatch_lock = threading.Lock()
        # per event loop: the calls made in its current turn, sent by _flush
        self._outboxes: dict[asyncio.AbstractEventLoop, list] = {}
        self._started = False
        self._closed = False
        atexit.register(self.close)

    @property
    def model(self) -> str:
        return self._model

    @property
    def processes(self) -> int:
        return len(self._workers)

    def worker_pids(self) -> list[int | None]:
        return [w.pid for w in self._workers]

    def calls_per_worker(self) -> list[int]:
        return [w.calls for w in self._workers]

    def worker_starts(self) -> list[int]:
        return [w.starts for w in self._workers]

    def __repr__(self) -> str:
        return (f"JudgeProcessPool(model={self._model!r}, processes={self.processes}, "
                f"max_concurrency={self.max_concurrency})")

    def start(self) -> "JudgeProcessPool":
        """Start every worker, in a thread of its own: the first start waits
        for the fork server to import litellm, which the caller does not wait
        for (calls sent meanwhile wait for their worker)."""
        if self._closed:
            raise PermanentJudgeError("the judge process pool is closed")
        with self._dispatch_lock:
            self._started = True
        threading.Thread(target=self._start_workers, name="judgeflow-judge-start", daemon=True).start()
        return self

    def _start_workers(self) -> None:
        for worker in self._workers:  # any slot whose worker is gone gets a fresh one
            if self._closed:
                return
            try:
                worker.ensure_started()
            except Exception as exc:  # noqa: BLE001 - the worker's next call starts it again, or says why not
                log.warning("judge worker %d did not start: %s", worker.index, exc)

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Whether every worker said hello within ``timeout`` s: tests, benchmark."""
        deadline = time.monotonic() + timeout
        while None in self.worker_pids():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def _least_busy(self) -> _Worker:
        """The worker with the fewest calls outstanding (sent or about to be);
        ties go to the one that has had fewest calls. The caller holds the dispatch lock."""
        return min(self._workers, key=lambda w: (w.outstanding, w.calls))

    def _check_open(self) -> None:
        if self._closed:
            raise PermanentJudgeError("the judge process pool is closed")
        if not self._started:
            self.start()

    def _estimate_prices(self, model: str) -> tuple[float, float] | None:
        """The configured prices of the judge's own model, else ``model``'s in the
        price map as a worker read it (its hello)."""
        if self._prices is not None and model == self._model:
            return self._prices
        return next((w.prices[model] for w in self._workers if w.prices.get(model) is not None), None)

    async def acomplete(self, request: JudgeRequest, call: Call | None = None) -> JudgeReply:
        """The call: its attempts (:meth:`_attempt`, each sent by a worker) in
        the one retry loop, :func:`~judgeflow.judge.retry.send_with_retries`,
        run here; each attempt's spend counted here too."""
        call = call or ANY_CALL
        model = request.model or self._model
        spend = CallSpend(model, self._estimate_prices(model), request)
        return await send_with_retries(lambda: self._attempt(request, call), policy=self.retry, spend=spend,
                                       pace=self._pace, permits=call.permits)

    async def _attempt(self, request: JudgeRequest, call: Call) -> JudgeReply | AttemptFailed:
        """One attempt, handed to a worker once it holds one of the pool's
        slots (the module doc) and ``call``'s send gate lets it leave the run's
        process. It goes with the time its claims are fresh until; a worker
        that would send it past that hands it back unsent, and the retry loop
        asks again. A gate that confirms the call without its freshness moving
        past now (the run's lease could not be renewed) leaves a worker no time
        to send it in: the attempt fails as transient."""
        self._check_open()
        await self._slots.acquire_async(call.priority)
        try:
            if not await call.may_send():
                return AttemptFailed(CallWithheld(f"judge {request.model or self._model}: not sent, the run no "
                                                  "longer owns the pair"))
            fresh = call.fresh_until()
            if fresh <= time.monotonic():
                return AttemptFailed(TransientJudgeError(
                    f"judge {request.model or self._model}: not sent, the run's claims could not be renewed to hand "
                    "the call to a judge worker"))
            try:
                return await self._dispatch(request, fresh, call.priority)
            except JudgeError as error:  # the worker is gone, or cannot start
                return AttemptFailed(error)
        finally:
            self._slots.release()

    async def _dispatch(self, request: JudgeRequest, fresh: float, priority: tuple) -> JudgeReply | AttemptFailed:
        """The calls a loop makes in one turn go to the workers together: one
        message per worker, sent once the turn's other callbacks have run."""
        self._check_open()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._dispatch_lock:
            worker = self._least_busy()
            worker.queued += 1
            outbox = self._outboxes.get(loop)
            first = outbox is None
            if first:
                outbox = self._outboxes[loop] = []
            outbox.append((worker, next(self._ids), (request, fresh, priority), future))
        if first:
            loop.call_soon(self._flush, loop)
        return await future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._dispatch_lock:
            outbox = self._outboxes.pop(loop, [])
            by_worker: dict[int, tuple[_Worker, list]] = {}
            for worker, call_id, request, future in outbox:
                worker.queued -= 1
                by_worker.setdefault(worker.index, (worker, []))[1].append((call_id, request, (loop, future)))
        for worker, calls in by_worker.values():
            worker.send(calls)

    def close(self) -> None:
        """Stop the workers and wait for them."""
        super().close()
        self._closed = True
        procs = [worker.hang_up() for worker in self._workers]  # every connection first: they exit together
        for proc in procs:
            _Worker.wait_closed(proc)
        atexit.unregister(self.close)

    def __enter__(self) -> "JudgeProcessPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
