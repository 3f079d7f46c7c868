"""One judge worker process of :class:`~judgeflow.judge.process_pool.JudgeProcessPool`.

Started as ``python -m judgeflow.judge.worker`` by the pool, never by hand. It
reads the settings, then ``(call id, JudgeRequest)`` frames from stdin, runs
each call on its event loop with its own
:class:`~judgeflow.judge.litellm_judge.LiteLLMJudge` (which bounds its calls
in flight to its share of ``max_concurrency``) and writes ``(call id, ok,
reply or error)`` frames to stdout as calls finish, in any order. It exits
when stdin closes: the run finished or its process died.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading


def main() -> int:
    # Keep the reply pipe for frames alone: anything printed (a library's
    # banner, a stray print) goes to stderr instead of corrupting it.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = sys.stdin.buffer

    from judgeflow.judge.litellm_judge import LiteLLMJudge
    from judgeflow.judge.process_pool import encode_error, read_frame, write_frame

    try:
        settings = read_frame(requests)
    except EOFError:
        return 0
    # the worker never calls load_settings: scrub its stderr (libraries' logs) too
    from judgeflow.scrub import install_log_scrubbing, register_settings

    register_settings(settings)
    install_log_scrubbing()
    judge = LiteLLMJudge.from_settings(settings)
    loop = asyncio.new_event_loop()

    async def answer(call_id: int, request) -> None:
        try:
            reply = await judge.acomplete(request)
        except BaseException as exc:  # everything goes back to the caller
            frame = (call_id, False, encode_error(exc))
        else:
            frame = (call_id, True, reply)
        write_frame(replies, frame)  # only ever from the loop's thread

    def read_requests() -> None:
        try:
            while True:
                call_id, request = read_frame(requests)
                loop.call_soon_threadsafe(loop.create_task, answer(call_id, request))
        except (EOFError, OSError):
            pass
        loop.call_soon_threadsafe(loop.stop)

    threading.Thread(target=read_requests, name="judgeflow-judge-requests", daemon=True).start()
    loop.run_forever()
    # Calls still in flight belong to a caller that is gone or closing: leave
    # without unwinding them (or printing warnings about them).
    replies.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
