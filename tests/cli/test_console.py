"""What a person sees and does at the terminal while `judgeflow score` runs
(judgeflow/cli/console.py): a live progress display under a terminal and
short lines through a pipe, both ending on the run summary's figures; a quiet
console; Ctrl-C that stops the run without losing or repeating a pair."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from tests.support.traces import BASE_TIME, first_step_calls, insert_traces, results, scripted_trace

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def cli_env(judgeflow_env: dict, prefect_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUDGEFLOW_", "PREFECT_LOGGING_"))}
    env.update(judgeflow_env, PREFECT_API_URL=prefect_url, PYTHONUNBUFFERED="1", **extra)
    return env


def judgeflow(*args: str) -> list[str]:
    return [sys.executable, "-m", "judgeflow.cli", *args]


def run_in_a_terminal(argv: list[str], env: dict, cwd, timeout: float = 300) -> tuple[int, str]:
    """``argv`` with stdin, stdout and stderr on a pseudo-terminal; its exit code and what it printed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env={**env, "TERM": "xterm"}, cwd=cwd)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed: the command is done
                break
            if not data:
                break
            out += data
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    return proc.returncode, out.decode("utf-8", "replace")


def summary_figures(text: str) -> dict[str, str]:
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]*?) \|\s*$", text, flags=re.M)
    return {k: v for k, v in rows}


def last_figures_line(text: str) -> dict[str, int]:
    """The display's last 'scored N · skipped N · failed N · ... judge calls N' line, as numbers."""
    lines = [line for line in ANSI.sub("", text).replace("\r", "\n").splitlines() if " · judge calls " in line]
    assert lines, text[-2000:]
    return {k: int(v.replace(",", "")) for k, v in re.findall(r"(scored|skipped|failed|judge calls) ([\d,]+)",
                                                                  lines[-1])}


def test_a_live_display_on_a_terminal_lines_through_a_pipe_both_ending_on_the_summary(
        judgeflow_env, db, prefect_server, judge_server, tmp_path):
    env = cli_env(judgeflow_env, prefect_server)
    insert_traces(db, [scripted_trace(i)[0] for i in range(40)])

    code, shown = run_in_a_terminal(judgeflow("score", "--no-alerts", "--batch-size", "20"), env, tmp_path)
    assert code == 0, shown[-3000:]
    assert "━" in shown and "\x1b[" in shown  # rich's bar, drawn with escape sequences
    plain = ANSI.sub("", shown)
    assert "80/80 pairs" in plain and "pairs/s" in plain and "ETA" in plain
    summary = summary_figures(plain)
    final = last_figures_line(shown)
    assert final == {"scored": int(summary["scores written"]), "skipped": int(summary["skipped"]),
                     "failed": int(summary["failed"]), "judge calls": int(summary["judge calls"])}
    assert final["scored"] + final["skipped"] + final["failed"] == 80 and final["judge calls"] > 0
    # the flow's INFO lines (a batch, a finished task run) stay off the terminal
    assert "Finished in state" not in plain and "scoring 20 pair(s)" not in plain

    insert_traces(db, [{**scripted_trace(i)[0], "id": f"more-{i}"} for i in range(40)])
    piped = subprocess.run(judgeflow("score", "--no-alerts", "--batch-size", "20"), env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert "\x1b[" not in piped.stderr + piped.stdout and "━" not in piped.stderr
    assert "score: 80 (trace, metric) pairs pending" in piped.stderr
    assert re.search(r"^score: 80/80 pairs \(100%\)", piped.stderr, flags=re.M), piped.stderr
    summary = summary_figures(piped.stdout)
    assert last_figures_line(piped.stderr) == {
        "scored": int(summary["scores written"]), "skipped": int(summary["skipped"]),
        "failed": int(summary["failed"]), "judge calls": int(summary["judge calls"])}


# what `judgeflow score` prints for 2,000 traces without -v: the database and
# Prefect lines, at most 12 progress lines (every 10%, or a minute) and the summary
CONSOLE_BYTES_2000_TRACES = 4000


@pytest.mark.slow  # two runs over 2,000 traces: ~40-80 s on a busy 2-core machine
def test_the_console_of_a_2000_trace_run_stays_small_unless_verbose(
        judgeflow_env, db, prefect_server, tmp_path):
    # 20 distinct contents: identical ones reuse a result, so the run is quick
    # while its batches and task runs are those of 2,000 traces
    rows = [{**scripted_trace(i % 20)[0], "id": f"c-{i:05d}", "created_at": BASE_TIME + timedelta(seconds=i)}
            for i in range(2000)]
    insert_traces(db, rows)
    env = cli_env(judgeflow_env, prefect_server, JUDGEFLOW_JUDGE_MODEL="offline")
    quiet = subprocess.run(judgeflow("score", "--no-alerts"), env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert summary_figures(quiet.stdout)["traces"] == "2000"
    printed = len(quiet.stdout.encode()) + len(quiet.stderr.encode())
    assert printed < CONSOLE_BYTES_2000_TRACES, quiet.stderr

    with db.begin() as conn:
        conn.execute(sa.text("DELETE FROM judgeflow.eval_results WHERE trace_id >= 'c-01900'"))
    verbose = subprocess.run(judgeflow("score", "--no-alerts", "-v"), env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=600)
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert "Finished in state Completed()" in verbose.stderr  # -v: Prefect's whole log, as before


def test_ctrl_c_halfway_stops_exits_130_and_loses_or_repeats_nothing(
        judgeflow_env, db, prefect_server, judge_server, tmp_path):
    judge_server.latency_mean_s = 0.1
    from judgeflow.db import migrate

    rows = [scripted_trace(i)[0] for i in range(80)]
    insert_traces(db, rows)
    migrate.upgrade(db)
    pairs = 2 * len(rows)
    env = cli_env(judgeflow_env, prefect_server, JUDGEFLOW_MAX_CONCURRENCY="8")
    proc = subprocess.Popen(judgeflow("score", "--no-alerts", "--batch-size", "20"), env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stored() -> int:
        with db.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM judgeflow.eval_results")).scalar_one()

    deadline = time.monotonic() + 300
    while stored() < pairs // 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before half its pairs were stored"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "stopping: no more claims" in err
    assert "**Stopped (Ctrl-C).**" in out
    summary = summary_figures(out)
    first = results(db)
    done = {k: v for k, v in first.items() if v["status"] in ("scored", "skipped", "failed")}
    assert pairs // 2 <= len(done) < pairs
    assert int(summary["scores written"]) + int(summary["skipped"]) + int(summary["failed"]) == len(done)
    with db.connect() as conn:
        # the claims of pairs not scored are free at once: none is left behind
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.claims")).scalar_one() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.superseded_results")).scalar_one() == 0

    started = time.monotonic()
    again = subprocess.run(judgeflow("score", "--no-alerts"), env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert time.monotonic() - started < 120  # no lease to wait out
    second = results(db)
    assert len(second) == pairs
    for key, row in done.items():  # what the stopped run stored stands, written once
        assert (second[key]["flow_run_id"], second[key]["scored_at"]) == (row["flow_run_id"], row["scored_at"])
    assert int(summary_figures(again.stdout)["scores written"]) + int(summary_figures(again.stdout)["skipped"]) \
        + int(summary_figures(again.stdout)["failed"]) == pairs - len(done)
    # every pair's judging began once over both runs: nothing judged twice, nothing skipped
    assert set(first_step_calls(judge_server).values()) == {1}


def test_piped_a_batch_wait_writes_a_line_at_least_every_period_and_a_stop_counts_no_pair_as_done():
    import io

    from judgeflow.cli.console import LineDisplay
    from judgeflow.judge.batches import BatchWait
    from judgeflow.model import ScoreOutcome
    from judgeflow.run.progress import RunProgress

    stream = io.StringIO()
    display = LineDisplay(stream, "scoring", every_s=0.2)
    waits = [BatchWait("batch_a", 2, 10, 3, 1, "in_progress", 190.0, 40.0)]
    display.started(RunProgress(total=4))
    display.watch_batches(lambda: waits)
    deadline = time.monotonic() + 30  # bounds a hang only: the lines come every 0.2 s
    while stream.getvalue().count("waiting on") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = stream.getvalue().splitlines()
    waiting = [line for line in lines if "waiting on" in line]
    assert len(waiting) >= 2, lines  # no pair ended, yet the wait is on the output
    assert "waiting on 1 judge batch(es): 4/10 lines answered, oldest 3:10, next poll in 0:40" in waiting[0]
    # stopped: the 4 pairs are left for the next run, not done
    waits.clear()
    left = RunProgress(total=4).add(ScoreOutcome(trace_id=f"t{i}", metric="m", status="deferred") for i in range(4))
    display.finished(left)
    last = stream.getvalue().splitlines()[-1]
    assert "0/4 pairs (0%)" in last and "left for other runs or the next one 4" in last, last
    written = len(stream.getvalue())
    time.sleep(0.5)
    assert len(stream.getvalue()) == written  # nothing after the end


def test_a_terminal_shows_each_batch_out_its_round_lines_age_and_next_poll():
    from judgeflow.cli.console import batch_wait_lines
    from judgeflow.judge.batches import BatchWait

    waits = [BatchWait(f"batch_{i}", 1, 10, i, 0, "in_progress", 65.0 + i, 5.0) for i in range(7)]
    lines = batch_wait_lines(waits, shown=5)
    assert lines[0] == "batch batch_0 · round 1 · 0/10 lines answered · in_progress · age 1:05 · next poll in 0:05"
    assert len(lines) == 6 and lines[-1] == "and 2 more batch(es) out"
