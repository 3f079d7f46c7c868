"""One judge worker process of :class:`~judgeflow.judge.process_pool.JudgeProcessPool`.

Started as ``python -m judgeflow.judge.worker [--fork R:W,...]`` by the pool,
never by hand. It imports litellm, reads the settings, forks one more worker
for each ``R:W`` pair of pipe descriptors the pool passed it (so litellm is
imported once for all of them), then every process reads ``(call id,
JudgeRequest)`` frames from its request pipe, runs each call on its event loop
with its own :class:`~judgeflow.judge.litellm_judge.LiteLLMJudge` (which bounds
its calls in flight to its share of ``max_concurrency``) and writes ``(call id,
ok, reply or error)`` frames to its reply pipe as calls finish, in any order,
after a first ``(HELLO, True, pid)``. Each exits when its request pipe closes:
the run finished or its process died.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from typing import IO


def _fork_pairs(argv: list[str]) -> list[tuple[int, int]]:
    if len(argv) >= 2 and argv[0] == "--fork":
        return [(int(r), int(w)) for r, w in (pair.split(":") for pair in argv[1].split(","))]
    return []


def _fork_workers(
    forks: list[tuple[int, int]], requests: IO[bytes], replies: IO[bytes]
) -> tuple[IO[bytes], IO[bytes], list[int]]:
    """Fork a worker per pair; returns the pipes this process serves (its own,
    or in a forked worker, its pair's) and the pids it forked. Called before
    any thread or event loop exists, so forking is safe."""
    children: list[int] = []
    for i, (request_fd, reply_fd) in enumerate(forks):
        pid = os.fork()
        if pid == 0:
            # keep only this pair: a pipe end left open here would hide another
            # worker's exit (or the run's) from the process reading the other end
            replies.close()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, requests.fileno())
            os.close(devnull)
            for later_request, later_reply in forks[i + 1:]:
                os.close(later_request)
                os.close(later_reply)
            return os.fdopen(request_fd, "rb"), os.fdopen(reply_fd, "wb"), []
        children.append(pid)
        os.close(request_fd)
        os.close(reply_fd)
    return requests, replies, children


def _reap(children: list[int], timeout_s: float) -> None:
    """Wait for the workers this process forked (they exit when the run closes
    their pipes, as this one did): reaped here, their CPU time is counted in
    this process's children, and so in the run's."""
    from judgeflow.local_process import reap_exited

    deadline = time.monotonic() + timeout_s
    waiting = set(children)
    while waiting and time.monotonic() < deadline:
        reap_exited(waiting)
        if waiting:
            time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C reaches the whole process group: the run handles it and closes the
    # workers' pipes, which ends them; a KeyboardInterrupt here would only print
    # a traceback per worker over the run's own message
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    forks = _fork_pairs(sys.argv[1:] if argv is None else argv)
    # Keep the reply pipe for frames alone: anything printed (a library's
    # banner, a stray print) goes to stderr instead of corrupting it.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests: IO[bytes] = sys.stdin.buffer

    import gc

    from judgeflow.judge import litellm_judge  # litellm's import, once, before forking
    from judgeflow.judge.process_pool import read_frame


    # litellm's import leaves ~1M long-lived objects: out of the collector's
    # way, each call's garbage collections are cheaper (~5% of a worker's CPU),
    # and forked workers share those pages instead of copying them
    gc.freeze()

    try:
        settings = read_frame(requests)
    except EOFError:
        return 0
    requests, replies, children = _fork_workers(forks, requests, replies)
    serve(settings, requests, replies)
    # Calls still in flight belong to a caller that is gone or closing: leave
    # without unwinding them (or printing warnings about them).
    _reap(children, timeout_s=10.0)
    os._exit(0)


def serve(settings, requests: IO[bytes], replies: IO[bytes]) -> None:
    """Answer ``(call id, JudgeRequest)`` frames from ``requests`` on ``replies``
    until ``requests`` closes (after a first ``(HELLO, True, pid)`` frame). Used
    by the workers the pool starts."""
    from judgeflow.judge.litellm_judge import LiteLLMJudge
    from judgeflow.judge.process_pool import HELLO, encode_error, read_frame, write_frame

    # the worker never calls load_settings: scrub its stderr (libraries' logs) too
    from judgeflow.scrub import install_log_scrubbing, register_settings

    register_settings(settings)
    install_log_scrubbing()
    judge = LiteLLMJudge.from_settings(settings)
    loop = asyncio.new_event_loop()
    write_frame(replies, (HELLO, True, os.getpid()))

    async def answer(call_id: int, request) -> None:
        try:
            reply = await judge.acomplete(request)
        except BaseException as exc:  # everything goes back to the caller
            frame = (call_id, False, encode_error(exc))
        else:
            frame = (call_id, True, reply)
        write_frame(replies, frame)  # only ever from the loop's thread

    arrived: asyncio.Queue = asyncio.Queue()

    async def start_calls() -> None:
        # litellm's lazy set-up on a canned reply first (LiteLLMJudge.warm_up): a
        # forked worker starts ~0.2 s before its run's first calls arrive, and without
        # it the first of them paid that set-up on its way out (~30 ms on two cores)
        await judge.warm_up()
        # One call started per turn of the loop. A burst of requests (a run's first
        # batch: 32 per worker at once) then goes out as each is prepared; started
        # all at once, each request waited for litellm to prepare every other one:
        # in a 400-trace run on two cores the first call reached the judge 120-160 ms
        # after the worker had it, now 30-75 ms.
        while True:
            call_id, request = await arrived.get()
            loop.create_task(answer(call_id, request))
            await asyncio.sleep(0)

    def read_requests() -> None:
        try:
            while True:
                frame = read_frame(requests)
                loop.call_soon_threadsafe(arrived.put_nowait, frame)
        except (EOFError, OSError):
            pass
        loop.call_soon_threadsafe(loop.stop)

    starter = loop.create_task(start_calls())  # noqa: F841 - kept referenced while the loop runs
    threading.Thread(target=read_requests, name="judgeflow-judge-requests", daemon=True).start()
    loop.run_forever()
    replies.flush()


if __name__ == "__main__":
    sys.exit(main())
