"""No byte of untrusted text reaches a pipe or a terminal as a control sequence:
a run piped against a failing judge (its worker processes' output included), and
`judgeflow show` on a terminal with colour codes in the trace."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from tests.support.judge_server import JudgeServer, error_reply
from tests.support.traces import insert_traces, scripted_trace

HOSTILE = "\x1b]0;owned\x07\x1b[30;40mblack on black\x1b[0m\x1b[2J"


def _env(judgeflow_env: dict, prefect_server: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env.update(judgeflow_env, PREFECT_API_URL=prefect_server, **extra)
    return env


@pytest.mark.parametrize("processes", ["1", "2"], ids=["in-process", "workers"])
def test_a_piped_run_against_a_failing_judge_writes_no_escape_byte(judgeflow_env, db, prefect_server, processes):
    insert_traces(db, [scripted_trace(i)[0] for i in range(3)])

    def failing(req):  # the judge's error text carries control sequences of its own
        return error_reply(400, f"bad request {HOSTILE}")

    with JudgeServer(failing) as judge:
        env = _env(judgeflow_env, prefect_server, JUDGEFLOW_JUDGE_API_BASE=judge.url,
                   JUDGEFLOW_JUDGE_PROCESSES=processes, JUDGEFLOW_JUDGE_MAX_RETRIES="0")
        done = subprocess.run([sys.executable, "-m", "judgeflow", "score", "--no-alerts", "-v"], env=env,
                              cwd=os.getcwd(), capture_output=True, timeout=400)
        assert judge.calls() > 0  # the judge was asked, and failed every call
    out = done.stdout + done.stderr
    assert b"failed" in out, out[-3000:]
    assert b"database connection: " in out  # the pool mode, shown with -v
    for stream in (done.stdout, done.stderr):
        assert stream.count(b"\x1b") == 0, [line for line in stream.splitlines() if b"\x1b" in line][:5]
        text = stream.decode("utf-8", "replace")  # C1 CSI as a character (0x9b is also a byte of UTF-8's "␛")
        assert "\x9b" not in text and "\x07" not in text
    # litellm's banner is off, in the command's own process as in the workers (not just made visible)
    assert b"Give Feedback" not in out and b"LiteLLM.Info" not in out, out[-3000:]


@pytest.mark.parametrize("processes", ["1", "2"], ids=["in-process", "workers"])
def test_an_unknown_provider_prints_no_litellm_provider_list(judgeflow_env, db, prefect_server, processes):
    insert_traces(db, [scripted_trace(0)[0]])
    with JudgeServer() as judge:
        env = _env(judgeflow_env, prefect_server, JUDGEFLOW_JUDGE_API_BASE=judge.url,
                   JUDGEFLOW_JUDGE_PROCESSES=processes, JUDGEFLOW_JUDGE_MODEL="no-such-provider-model",
                   JUDGEFLOW_JUDGE_MAX_RETRIES="0")
        done = subprocess.run([sys.executable, "-m", "judgeflow", "score", "--no-alerts"], env=env,
                              cwd=os.getcwd(), capture_output=True, timeout=400)
        assert judge.calls() == 0  # litellm refused the model before any request
    out = done.stdout + done.stderr
    assert b"Provider List" not in out and b"Give Feedback" not in out, out[-3000:]
    assert out.count(b"\x1b") == 0, out[-3000:]


def _read_pty(fd: int, proc: subprocess.Popen, timeout_s: float) -> bytes:
    chunks, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the other side closed
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks)


def test_show_on_a_terminal_prints_no_colour_from_the_trace(judgeflow_env, db, prefect_server):
    row = dict(scripted_trace(0)[0], output=f"visible text {HOSTILE} more [toxic]. Fact: x [halluc=0.0].")
    insert_traces(db, [row])
    env = _env(judgeflow_env, prefect_server, TERM="xterm-256color")
    # scored in this process (a run's own output is the piped tests' above): `show` is what meets the terminal
    from judgeflow.flows.scoring import score_new_traces

    scored = score_new_traces(evaluate_alerts=False)
    assert scored.scored == 2 and scored.failed == 0, scored
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "judgeflow", "show", row["id"]], env=env, cwd=os.getcwd(),
                                stdin=follower, stdout=follower, stderr=follower)
        os.close(follower)
        out = _read_pty(leader, proc, 300)
        proc.wait(timeout=60)
    finally:
        os.close(leader)
    assert proc.returncode == 0, out[-3000:]
    assert "black on black".encode() in out  # the trace is shown ...
    assert out.count(b"\x1b") == 0, out[-2000:]  # ... with no sequence of its own, and nothing coloured
