"""A judge whose calls run in worker processes (``JUDGEFLOW_JUDGE_PROCESSES``).

Why: litellm and the OpenAI client under it cost ~5 ms of CPU per call
(measured in ``bench/``: two thirds of a scoring process's CPU with a fast
judge). Python runs that on one core however many threads or coroutines make
the calls, so one scoring process cannot go faster than one core allows. This
judge keeps the run's Prefect tasks, claims, metrics and writes where they are
and moves only the litellm calls into ``processes`` children
(``python -m judgeflow.judge.worker``), each owning one
:class:`~judgeflow.judge.litellm_judge.LiteLLMJudge` and one event loop.

Behaviour:

* **One bound.** ``max_concurrency`` is split between the workers (6 over 4
  workers: 2, 2, 1, 1), each enforcing its share, so the run never has more
  calls in flight than with one process; a call goes to the worker with the
  fewest outstanding.
* **Same errors, same retries.** Each worker's adapter retries transient
  errors as in-process; what it finally raises crosses back as the same
  :mod:`judgeflow.errors` class with its attributes (``retry_after_s``,
  ``status_code``).
* **A worker that dies** (killed, out of memory) fails the calls it had with
  :class:`~judgeflow.errors.TransientJudgeError`, which the scoring tasks
  retry; the next call starts a new worker. Nothing it was doing is lost: the
  pairs' claims are still held by the run. A worker that exits
  :data:`MAX_FAILED_STARTS` times in a row before answering anything (a broken
  environment) is not started again: calls to it fail with
  :class:`~judgeflow.errors.PermanentJudgeError`.
* **One litellm import.** The first start spawns one worker process, which
  imports litellm (~3 s of CPU) and then forks the others from itself, each
  with its own pair of pipes that the pool created: on two cores, two workers
  importing litellm side by side beside the run's own start-up delayed the
  first judge call by ~2 s. A worker started later (one replacing a dead
  worker) is a fresh process of its own. Forked workers are not children of
  the run's process: the pool learns their pid from their first frame and
  sees them exit by the end of their reply pipe.
* **Workers die with their process.** A worker exits when its stdin closes:
  when the pool is closed (:meth:`JudgeProcessPool.close`; at the latest at
  exit) or when the process that started it is killed. The pool is cached per
  process (:func:`judgeflow.judge.factory.build_judge`), so several runs in
  one process share warm workers.

Wire format: length-prefixed pickles over the child's stdin/stdout (the child
moves its own ``sys.stdout`` to stderr so nothing else writes to the pipe).
Nothing here imports litellm.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import IO, TYPE_CHECKING, Any

import cloudpickle

from judgeflow import errors
from judgeflow.errors import JudgeError, PermanentJudgeError, TransientJudgeError
from judgeflow.judge.base import JudgeReply, JudgeRequest, queue_ahead_for

if TYPE_CHECKING:
    from judgeflow.settings import Settings

log = logging.getLogger("judgeflow.judge")

__all__ = ["JudgeProcessPool", "split_concurrency", "read_frame", "write_frame", "encode_error", "decode_error"]

_HEADER = struct.Struct(">I")
_CLOSE_WAIT_S = 10.0
WORKER_COMMAND = (sys.executable, "-m", "judgeflow.judge.worker")
MAX_FAILED_STARTS = 3  # workers in a row that died before answering anything
HELLO = -1  # call id of a worker's first frame: (HELLO, True, its pid), once it can take calls


# --------------------------------------------------------------------------
# the wire (shared with judgeflow.judge.worker)
# --------------------------------------------------------------------------


def write_frame(stream: IO[bytes], obj: Any) -> None:
    payload = cloudpickle.dumps(obj)
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next object, or ``EOFError`` when the other side has gone."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        raise EOFError
    return cloudpickle.loads(payload)


def encode_error(exc: BaseException) -> tuple[str, str, dict]:
    """An error as (class name, message, attributes): judgeflow's errors take
    keyword-only arguments, which plain pickling cannot rebuild."""
    if isinstance(exc, JudgeError):
        attrs = {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, bool, type(None)))}
        return type(exc).__name__, str(exc), attrs
    return "PermanentJudgeError", f"judge worker: unexpected {type(exc).__name__}: {exc}", {}


def decode_error(name: str, message: str, attrs: dict) -> JudgeError:
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, JudgeError)):
        cls = PermanentJudgeError
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    if issubclass(cls, TransientJudgeError):
        err.retry_after_s = None  # type: ignore[attr-defined]
    vars(err).update(attrs)
    return err


def _settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete ``future`` unless its caller already gave up on it (cancelled)."""
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:  # cancelled between the check and now
        pass


def split_concurrency(total: int, processes: int) -> list[int]:
    """``total`` calls in flight shared by at most ``processes`` workers, each >= 1."""
    n = max(1, min(processes, total))
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


# --------------------------------------------------------------------------
# one worker, seen from the run's process
# --------------------------------------------------------------------------


def _hand_over_pipes(count: int, hand_over) -> list["_ForkedProcess"]:
    """Make a (requests, replies) pipe pair per worker, pass the child ends
    ``[(request read fd, reply write fd), ...]`` to ``hand_over`` (which gives
    them to whatever will become the workers), and return each worker as seen
    through the ends kept here. The child ends are closed here in any case; the
    kept ends too when ``hand_over`` fails."""
    pipes = [(os.pipe(), os.pipe()) for _ in range(count)]
    try:
        hand_over([(requests[0], replies[1]) for requests, replies in pipes])
    except BaseException:
        for requests, replies in pipes:  # nobody will use ours either
            os.close(requests[1])
            os.close(replies[0])
        raise
    finally:
        for requests, replies in pipes:  # the workers (or their parent) hold the child ends now
            os.close(requests[0])
            os.close(replies[1])
    return [_ForkedProcess(os.fdopen(requests[1], "wb"), os.fdopen(replies[0], "rb")) for requests, replies in pipes]


class _ForkedProcess:
    """A worker forked by another worker: the part of ``subprocess.Popen`` the
    pool uses, kept through the worker's pipes, since it is not our child (no
    exit code: it is reaped by the worker that forked it)."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.stdin, self.stdout = stdin, stdout
        self.pid: int | None = None  # from its hello frame
        self._gone = threading.Event()

    def saw_exit(self) -> None:
        self._gone.set()

    def poll(self) -> int | None:
        return None if not self._gone.is_set() else -1

    def wait(self, timeout: float | None = None) -> int | None:
        if not self._gone.wait(timeout):
            raise subprocess.TimeoutExpired("judge worker", timeout or 0)
        return None  # unknown

    def kill(self) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class _Worker:
    """One worker slot: its current process, restarted on the next call after it died."""

    def __init__(self, index: int, settings: "Settings") -> None:
        self.index = index
        self._settings = settings
        self._lock = threading.Lock()  # guards the process, pipe writes and the pending maps
        self._proc: subprocess.Popen | None = None
        # calls sent to the current process; each process's reader owns its own map,
        # so a call can never wait on a process that is already gone
        self._pending: dict[int, Future] = {}
        self.calls = 0  # calls sent over this slot's lifetime (tests, benchmark)
        self.starts = 0
        self.failed_starts = 0  # processes in a row that exited without answering a call
        self._last_exit: int | None = None

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start(self, forks: list[tuple[int, int]] | None = None) -> None:
        """Start a worker process; ``forks``: (request read fd, reply write fd)
        pairs, one per further worker it forks after importing litellm."""
        argv = list(WORKER_COMMAND)
        if forks:
            argv += ["--fork", ",".join(f"{r}:{w}" for r, w in forks)]
        # -m with this interpreter: the child imports judgeflow from the same
        # environment; its stderr is ours, so its log lines reach the run's log.
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            pass_fds=[fd for pair in forks or () for fd in pair],
        )
        self._adopt(proc)

    def _adopt(self, proc: "subprocess.Popen | _ForkedProcess", *, send_settings: bool = True) -> None:
        """Make ``proc`` this slot's worker and, unless it inherited them from the
        worker that forked it, send it its settings (its concurrency share)."""
        self.starts += 1
        self._proc, self._pending = proc, {}
        # the reader first: if the worker dies before taking its settings, the
        # reader sees it exit and counts a failed start
        threading.Thread(target=self._read_replies, args=(proc, self._pending),
                         name=f"judgeflow-judge-worker-{self.index}", daemon=True).start()
        if send_settings:
            write_frame(proc.stdin, self._settings)

    def start_with_forks(self, others: list["_Worker"]) -> None:
        """Start this slot's process, which forks one worker for each of ``others``."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            forked = _hand_over_pipes(len(others), lambda child_ends: self._start(forks=child_ends))
        for other, proc in zip(others, forked):
            other.adopt_forked(proc, send_settings=False)  # forked after this worker read its settings

    def adopt_forked(self, proc: _ForkedProcess, *, send_settings: bool) -> None:
        with self._lock:
            self._adopt(proc, send_settings=send_settings)

    def _ensure_process(self) -> None:
        """Start a process unless one is running (the caller holds the lock)."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()

    def ensure_started(self) -> None:
        with self._lock:
            self._ensure_process()

    def send(self, call_id: int, request: JudgeRequest, future: Future) -> None:
        with self._lock:
            if self.failed_starts >= MAX_FAILED_STARTS:
                # a worker that cannot start (broken environment) is not retried forever
                _settle(future, error=PermanentJudgeError(
                    f"judge worker {self.index} failed to start {self.failed_starts} times in a row "
                    f"(last exit code {self._last_exit}); see the run's log for its error"
                ))
                return
            self.calls += 1
            try:
                self._ensure_process()
                self._pending[call_id] = future
                write_frame(self._proc.stdin, (call_id, request))
            except (OSError, ValueError) as exc:  # the worker died under us
                self._pending.pop(call_id, None)
                _settle(future, error=TransientJudgeError(f"judge worker {self.index} is gone: {exc}"))

    def _read_replies(self, proc: subprocess.Popen, pending: dict[int, Future]) -> None:
        answered = 0
        try:
            while True:
                call_id, ok, payload = read_frame(proc.stdout)
                with self._lock:
                    future = pending.pop(call_id, None)
                    if not answered:
                        self.failed_starts = 0
                answered += 1
                if call_id == HELLO:
                    if isinstance(proc, _ForkedProcess):
                        proc.pid = payload
                    continue
                if future is None:  # e.g. its caller was cancelled
                    continue
                if ok:
                    _settle(future, result=payload)
                else:
                    _settle(future, error=decode_error(*payload))
        except (EOFError, OSError, ValueError):
            pass
        if isinstance(proc, _ForkedProcess):
            proc.saw_exit()
        code = proc.wait()  # None: a forked worker's code is not ours to know
        with self._lock:
            lost = list(pending.values())
            pending.clear()
            if self._proc is proc:
                self._proc = None
            if not answered and code != 0:
                self.failed_starts += 1
                self._last_exit = code
        if lost:
            log.warning("judge worker %d exited (code %s) with %d call(s) in flight; they will be retried",
                        self.index, code, len(lost))
        for future in lost:
            _settle(future, error=TransientJudgeError(f"judge worker {self.index} exited (code {code})"))

    def hang_up(self) -> "subprocess.Popen | _ForkedProcess | None":
        """Close the worker's request pipe (it exits when it reads the end);
        returns its process for :meth:`wait_closed`."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        return proc

    @staticmethod
    def wait_closed(proc: "subprocess.Popen | _ForkedProcess | None") -> None:
        if proc is None:
            return
        try:
            proc.wait(timeout=_CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------
# the pool
# --------------------------------------------------------------------------


class JudgeProcessPool:
    """A :class:`~judgeflow.judge.base.Judge` that sends each call to one of
    ``processes`` worker processes (see the module doc). Workers start
    together on the first call (or :meth:`start`): each takes seconds to import
    litellm."""

    def __init__(self, settings: "Settings", processes: int | None = None) -> None:
        if processes is None:
            from judgeflow.judge.factory import judge_process_count

            processes = judge_process_count(settings)
        shares = split_concurrency(settings.max_concurrency, processes)
        self._model = settings.judge_model
        self._settings = settings
        self.max_concurrency = settings.max_concurrency
        self._workers = [
            _Worker(i, settings.model_copy(update={"max_concurrency": share}))
            for i, share in enumerate(shares)
        ]
        self._ids = itertools.count()
        self._dispatch_lock = threading.Lock()
        self._started = False
        self._closed = False
        atexit.register(self.close)

    @property
    def model(self) -> str:
        return self._model

    @property
    def processes(self) -> int:
        return len(self._workers)

    @property
    def queue_ahead(self) -> int:
        """Calls beyond ``max_concurrency`` a run may hand over
        (:func:`judgeflow.judge.base.queue_ahead`): they go to the workers with
        the fewest outstanding, whose judges hold them until a slot of their
        share frees, so no worker's share idles while the run prepares its next call."""
        return queue_ahead_for(self.max_concurrency)

    def worker_pids(self) -> list[int | None]:
        return [w.pid for w in self._workers]

    def calls_per_worker(self) -> list[int]:
        return [w.calls for w in self._workers]

    def worker_starts(self) -> list[int]:
        return [w.starts for w in self._workers]

    def __repr__(self) -> str:
        return f"JudgeProcessPool(model={self._model!r}, processes={self.processes}, max_concurrency={self.max_concurrency})"

    def start(self) -> "JudgeProcessPool":
        """Start every worker without waiting for them: the first imports
        litellm and forks the others (see the module doc)."""
        with self._dispatch_lock:
            if not self._started:
                first, *others = self._workers
                first.start_with_forks(others)
                self._started = True
        for worker in self._workers:  # any slot whose worker is gone gets a fresh one
            worker.ensure_started()
        return self

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Whether every worker said hello (knows its pid) within ``timeout`` s: tests, benchmark."""
        deadline = time.monotonic() + timeout
        while None in self.worker_pids():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def _submit(self, request: JudgeRequest) -> Future:
        if self._closed:
            raise PermanentJudgeError("the judge process pool is closed")
        if not self._started:
            self.start()
        future: Future = Future()
        with self._dispatch_lock:
            # fewest outstanding; ties go to the one that has had fewest calls
            worker = min(self._workers, key=lambda w: (w.outstanding, w.calls))
            call_id = next(self._ids)
        worker.send(call_id, request, future)
        return future

    def complete(self, request: JudgeRequest) -> JudgeReply:
        return self._submit(request).result()

    async def acomplete(self, request: JudgeRequest) -> JudgeReply:
        return await asyncio.wrap_future(self._submit(request))

    def close(self) -> None:
        """Stop the workers (waiting for them, so their CPU time is accounted to this process)."""
        self._closed = True
        # every pipe first: the worker that forked the others waits for them before it exits
        procs = [worker.hang_up() for worker in self._workers]
        for proc in procs:
            _Worker.wait_closed(proc)
        atexit.unregister(self.close)

    def __enter__(self) -> "JudgeProcessPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

