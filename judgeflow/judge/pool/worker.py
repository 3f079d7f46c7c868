"""A judge worker process: one :class:`~judgeflow.judge.litellm_judge.LiteLLMJudge`
on one event loop, answering the calls its run sends over
:mod:`multiprocessing` pipes.

The run (:class:`~judgeflow.judge.pool.process_pool.JudgeProcessPool`) sends lists
of ``(call id, (JudgeRequest, fresh until, priority))``: the attempts it
prepared in one turn of its own loop, each with the time its send gate is
fresh until and its place in the queue for a slot. The worker makes each
attempt once (the retry loop is the run's: judgeflow/judge/retry.py) and
answers with lists of ``(call id, True, JudgeReply)`` or ``(call id, False,
(encoded error, sent, handed back))``, after a first
``[(HELLO, True, (pid, {model: estimate prices}))]`` (its own model's and each
metric's own model's, read from litellm's price map, which the run never imports):
the replies finished in one turn of its event loop go back as one message
(one pipe write and one wake-up of the reader on the other side instead of one
per call). The event loop itself watches the request pipe: a reader thread
would hand each request over with a wake-up and a GIL switch. Requests come
on one one-way pipe and replies go back on another; the
:class:`multiprocessing.connection.Connection` pickles them: one wire format.
When the run's end of the request pipe closes (the pool is closed, or the
run's process is gone, killed included) the worker reads EOF and exits.
Nothing here imports litellm at module level: the run's process imports this
module to name the worker's entry point.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from judgeflow import errors
from judgeflow.errors import CallWithheld, JudgeError, PermanentJudgeError, TransientJudgeError
from judgeflow.judge.base import JudgeReply, Usage
from judgeflow.judge.retry import AttemptFailed
from judgeflow.judge.send_gate import Call, FreshUntil
from judgeflow.infra.heap import settle_heap
from judgeflow.terminal_text import TerminalSafeStream

HELLO = -1  # call id of a worker's first message: (HELLO, True, its pid), once it can take calls


def encode_error(exc: BaseException) -> tuple[str, str, dict]:
    """An error as (class name, message, attributes): judgeflow's errors take
    keyword-only arguments, which plain pickling cannot rebuild. ``billed``
    (what the call's attempts cost) crosses with the rest."""
    if isinstance(exc, JudgeError):
        attrs = {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, bool, type(None), Usage))}
        return type(exc).__name__, str(exc), attrs
    return "PermanentJudgeError", f"judge worker: unexpected {type(exc).__name__}: {exc}", {}


def decode_error(name: str, message: str, attrs: dict) -> JudgeError:
    """The error :func:`encode_error` described; only judgeflow's judge errors are rebuilt."""
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, JudgeError)):
        cls = PermanentJudgeError
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    if issubclass(cls, TransientJudgeError):
        err.retry_after_s = None  # type: ignore[attr-defined]
    vars(err).update(attrs)
    return err


def encode_failure(failed: AttemptFailed) -> tuple:
    """An attempt that failed in the worker, for the run's retry loop. One the
    worker's gate withheld (its claims no longer fresh) is handed back."""
    return encode_error(failed.error), failed.sent, isinstance(failed.error, CallWithheld)


def decode_failure(payload: tuple) -> AttemptFailed:
    error, sent, handed_back = payload
    return AttemptFailed(decode_error(*error), sent=sent, handed_back=handed_back)


def serve(requests: Any, replies: Any, config: Any) -> None:
    """The worker's entry point (a :class:`multiprocessing.Process` target):
    answer the calls read from ``requests`` on ``replies`` with a judge of
    ``config`` (a :class:`~judgeflow.judge.config.JudgeConfig`: the judge's own
    key, no other secret) until ``requests`` reaches EOF."""
    # Ctrl-C reaches the whole process group: the run handles it and closes the
    # connection, which ends this worker; a KeyboardInterrupt here would only
    # print a traceback per worker over the run's own message
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a worker answers through its pipes only: what a library prints (litellm's
    # coloured banner on every failed call) goes nowhere, and its log lines reach
    # the run's stderr without a control character (judge text may be in them)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = open(os.devnull, "w")
    sys.stderr = TerminalSafeStream(sys.stderr)

    from judgeflow.judge.litellm_judge import LiteLLMJudge
    from judgeflow.config.scrub import install_log_scrubbing, register

    # the worker knows only the judge's secrets: scrub its stderr (libraries' logs) of them
    register(config.secrets())
    install_log_scrubbing()
    _Answering(LiteLLMJudge.from_config(config), requests, replies).run()
    # Calls still in flight belong to a caller that is gone or closing: leave
    # without unwinding them (or printing warnings about them).
    os._exit(0)


class _Answering:
    """The worker's event loop: reads requests, answers them, sends the
    replies finished in one turn of the loop together."""

    def __init__(self, judge: Any, requests: Any, replies: Any) -> None:
        self.judge, self.requests, self.replies = judge, requests, replies
        self.loop = asyncio.new_event_loop()
        self.outbox: list[tuple] = []
        self.arrived: asyncio.Queue = asyncio.Queue()

    def run(self) -> None:
        starter = self.loop.create_task(self._start_calls())  # noqa: F841 - kept referenced while the loop runs
        self.loop.add_reader(self.requests.fileno(), self._read_requests)
        self.loop.run_forever()

    def _flush(self) -> None:
        batch = self.outbox[:]
        self.outbox.clear()
        try:
            self.replies.send(batch)
        except OSError:  # the run is gone: EOF on the request pipe ends this worker
            pass

    async def _answer(self, call_id: int, request, fresh: float, priority: tuple) -> None:
        # the run's claims are fresh until ``fresh``: past it, the attempt is
        # not sent here but handed back to the run (judge/send_gate.py);
        # ``priority``: its place among this worker's attempts waiting for a slot
        try:
            outcome = await self.judge.attempt(request, Call(FreshUntil(fresh), priority))
        except BaseException as exc:  # everything goes back to the caller
            outcome = AttemptFailed(decode_error(*encode_error(exc)))
        if isinstance(outcome, JudgeReply):
            message = (call_id, True, outcome)
        else:
            message = (call_id, False, encode_failure(outcome))
        if not self.outbox:
            self.loop.call_soon(self._flush)  # after the other calls finishing in this turn of the loop
        self.outbox.append(message)

    def _read_requests(self) -> None:
        # called by the loop when the request pipe is readable: every message
        # already there, without blocking (a message is written whole)
        try:
            while self.requests.poll():
                for call in self.requests.recv():
                    self.arrived.put_nowait(call)
        except (EOFError, OSError):  # the run closed its end, or is gone
            self.loop.stop()

    async def _start_calls(self) -> None:
        # litellm's lazy set-up on a canned reply first, so the run's first calls do not pay it
        await self.judge.warm_up()
        settle_heap()
        self.replies.send([(HELLO, True, (os.getpid(), self.judge.prices_by_model()))])
        # one call started per turn of the loop: a burst of requests (a run's
        # first batch) goes out as each is prepared, instead of each waiting
        # for litellm to prepare every other one first
        while True:
            call_id, (request, fresh, priority) = await self.arrived.get()
            self.loop.create_task(self._answer(call_id, request, fresh, priority))
            await asyncio.sleep(0)
