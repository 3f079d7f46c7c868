"""The terminal's side of a run started from the command line (``judgeflow
score``, ``backfill``): a quiet log, a progress display, and Ctrl-C.

- **Log**: Prefect's console handler shows warnings and errors only; INFO
  lines (a batch started, a task run finished) still go to the Prefect API,
  so the UI keeps them. ``-v/--verbose`` shows them all. Set through Prefect's
  own logging settings (``PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL``, an
  override of its logging.yml), before Prefect is imported.
- **Progress**: on a terminal, one live display (rich, which Prefect ships):
  pairs done of those pending at the start, rate, ETA, scored / skipped /
  failed, judge calls and spend (and the budget). Elsewhere (cron, CI, a
  pipe) a short line every ``LINE_EVERY_S`` seconds or ``LINE_EVERY_PCT``
  per cent. Both on stderr: stdout keeps the summary. A run through the batch
  API shows what it waits on (judgeflow.run.progress.watch_batches): on a
  terminal a line per batch out (id, round, lines answered, status, age, next
  poll), piped a line at least every ``LINE_EVERY_S`` seconds while it waits,
  as no pair ends then. Pairs count as done once this run ended them (scored,
  skipped, failed); those left for the next run are counted apart.
- **Ctrl-C**: the first asks the run to stop (the run's own stop request, entered with its settings,
  judgeflow/run/entry.py, and read by the run's gate, judgeflow/run/gate.py): no
  more claims, judge calls in flight finish and are stored, pairs not started
  are given back; the run then prints its summary and the command exits 130.
  A second Ctrl-C quits at once: the claims of a quit run are taken over by
  the next run (its lock dies with it).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TextIO

from judgeflow.run.entry import StopRequest
from judgeflow.run.progress import RunProgress

CONSOLE_LEVEL = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"
QUIET_LEVEL = "WARNING"
LINE_EVERY_S = 60.0
LINE_EVERY_PCT = 10.0
EXIT_STOPPED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
BATCH_LINES_SHOWN = 5  # batches out listed on a terminal; the rest counted


def set_log_level(verbose: bool) -> None:
    """The terminal's log level, before Prefect is imported (it reads its
    logging settings then). A level set in the environment is kept unless
    ``verbose``."""
    if verbose:
        os.environ[CONSOLE_LEVEL] = "NOTSET"
    else:
        os.environ.setdefault(CONSOLE_LEVEL, QUIET_LEVEL)


def _money(usd: float | None) -> str:
    return "unknown" if usd is None else f"${usd:,.4f}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def figures(p: RunProgress) -> str:
    """scored / skipped / failed, judge calls, spend: the display's second line."""
    parts = [f"scored {p.scored:,}", f"skipped {p.skipped:,}", f"failed {p.failed:,}"]
    if p.reused:
        parts.append(f"reused {p.reused:,}")
    if p.left:
        parts.append(f"left for other runs or the next one {p.left:,}")
    parts.append(f"judge calls {p.judge_calls:,}")
    spent = f"spent {_money(p.cost_usd)}"
    if p.budget_usd is not None:
        spent += f" of the {_money(p.budget_usd)} budget"
    parts.append(spent)
    return " · ".join(parts)


def rate_and_eta(p: RunProgress) -> str:
    elapsed = p.elapsed_s
    rate = p.done / elapsed if elapsed > 0 else 0.0
    left = max(0, p.total - p.done)
    eta = _duration(left / rate) if rate > 0 and left else ("0:00" if not left else "unknown")
    return f"{rate:,.1f} pairs/s · ETA {eta} · {_duration(elapsed)} elapsed"


def batch_wait_lines(waits: list[Any], shown: int = BATCH_LINES_SHOWN) -> list[str]:
    """A line per batch out (judgeflow.judge.batches.BatchWait), oldest first, at most ``shown``."""
    lines = [f"batch {w.batch_id} · round {w.round} · {w.completed + w.failed:,}/{w.lines:,} lines answered · "
             f"{w.status} · age {_duration(w.age_s)} · next poll in {_duration(w.next_poll_s)}" for w in waits[:shown]]
    if len(waits) > shown:
        lines.append(f"and {len(waits) - shown} more batch(es) out")
    return lines


def batch_wait_brief(waits: list[Any]) -> str:
    """One phrase for all the batches out: how many, lines answered, the oldest's age, the next poll."""
    lines = sum(w.lines for w in waits)
    answered = sum(min(w.lines, w.completed + w.failed) for w in waits)
    return (f"waiting on {len(waits)} judge batch(es): {answered:,}/{lines:,} lines answered, oldest "
            f"{_duration(max(w.age_s for w in waits))}, next poll in {_duration(min(w.next_poll_s for w in waits))}")


def _waits_of(source: Callable[[], list] | None) -> list:
    if source is None:
        return []
    try:
        return list(source())
    except Exception:  # noqa: BLE001 - a display must never stop scoring
        return []


class LiveDisplay:
    """One live display on a terminal (rich), redrawn a few times a second."""

    def __init__(self, stream: TextIO, title: str, ui_url: str | None = None):
        from rich.console import Console

        from judgeflow.terminal_text import unfiltered

        self._console = Console(file=unfiltered(stream))  # draws with cursor moves; prints judgeflow's figures
        self._title = title
        self._ui_url = ui_url
        self._live = None
        self._bar = None
        self._task = None
        self.last: RunProgress | None = None
        self.batches: Callable[[], list] | None = None

    def watch_batches(self, waits: Callable[[], list]) -> None:
        """Show the batches the run waits on under its figures, from ``waits()`` at each redraw."""
        self.batches = waits

    def started(self, p: RunProgress) -> None:
        from rich.console import Group
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn

        if self._ui_url and p.flow_run_id:
            self._console.print(f"this run in the Prefect UI: {self._ui_url}/runs/flow-run/{p.flow_run_id}",
                                highlight=False)
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("pairs"), TaskProgressColumn(), console=self._console, auto_refresh=False)
        self._task = self._bar.add_task(self._title, total=max(p.total, 1))
        self.last = p
        # rate, ETA and elapsed are worked out at each redraw, not only when a batch ends
        self._live = Live(Group(self._bar, _Figures(self)), console=self._console, refresh_per_second=4,
                          redirect_stdout=False, redirect_stderr=False)
        self._live.start()
        self.last = p

    def advanced(self, p: RunProgress) -> None:
        if self._live is None:
            self.started(p)
        self._bar.update(self._task, completed=p.finished, total=max(p.total, p.finished, 1))
        self.last = p

    def finished(self, p: RunProgress) -> None:
        self.advanced(p)
        self.close()

    def note(self, text: str) -> None:
        """A line above the display (or alone, when it is not showing)."""
        self._console.print(text, highlight=False, markup=False)

    def close(self) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None


class _Figures:
    """The display's lines under its bar, from the latest figures at each redraw."""

    def __init__(self, display: LiveDisplay):
        self._display = display

    def __rich__(self):
        from rich.text import Text

        p = self._display.last
        waits = _waits_of(self._display.batches)
        return Text("\n".join([rate_and_eta(p), figures(p), *batch_wait_lines(waits)]))


class LineDisplay:
    """A short line every ``every_s`` seconds or ``every_pct`` per cent, and at the end."""

    def __init__(self, stream: TextIO, title: str, ui_url: str | None = None, *,
                 every_s: float = LINE_EVERY_S, every_pct: float = LINE_EVERY_PCT):
        self._stream = stream
        self._title = title
        self._ui_url = ui_url
        self._every_s = every_s
        self._every_pct = every_pct
        self._last_line_at = time.monotonic()
        self._last_done = 0
        self.last: RunProgress | None = None
        self.batches: Callable[[], list] | None = None
        self._lock = threading.Lock()
        self._ended = threading.Event()

    def _write(self, text: str) -> None:
        with self._lock:
            self._stream.write(text + "\n")
            self._stream.flush()
            self._last_line_at = time.monotonic()

    def line(self, p: RunProgress) -> str:
        pct = 100.0 * p.finished / p.total if p.total else 100.0
        text = f"{self._title}: {p.finished:,}/{p.total:,} pairs ({pct:.0f}%) · {rate_and_eta(p)} · {figures(p)}"
        waits = _waits_of(self.batches)
        return f"{text} · {batch_wait_brief(waits)}" if waits else text

    def watch_batches(self, waits: Callable[[], list]) -> None:
        """While the run waits on batches no pair ends: a line at least every ``every_s`` seconds all the same."""
        self.batches = waits
        threading.Thread(target=self._tick, name="judgeflow-batch-lines", daemon=True).start()

    def _tick(self) -> None:
        while not self._ended.wait(min(1.0, self._every_s)):
            if self.last is not None and time.monotonic() - self._last_line_at >= self._every_s:
                self._write(self.line(self.last))

    def started(self, p: RunProgress) -> None:
        self.last = p
        link = f"; {self._ui_url}/runs/flow-run/{p.flow_run_id}" if self._ui_url and p.flow_run_id else ""
        self._write(f"{self._title}: {p.total:,} (trace, metric) pairs pending{link}")
        self._last_line_at = time.monotonic()

    def advanced(self, p: RunProgress) -> None:
        self.last = p
        step = self._every_pct / 100.0 * max(p.total, 1)
        if p.done - self._last_done >= step or time.monotonic() - self._last_line_at >= self._every_s:
            self._last_done = p.done
            self._write(self.line(p))

    def finished(self, p: RunProgress) -> None:
        self._ended.set()
        self.last = p
        if p.done != self._last_done or not p.done:
            self._write(self.line(p))

    def note(self, text: str) -> None:
        self._write(text)

    def close(self) -> None:
        self._ended.set()


def display_for(stream: TextIO, title: str, ui_url: str | None = None) -> LiveDisplay | LineDisplay:
    """A live display on a terminal, lines elsewhere."""
    from judgeflow.terminal_text import is_terminal

    if is_terminal(stream) and os.environ.get("TERM") != "dumb":
        return LiveDisplay(stream, title, ui_url)
    return LineDisplay(stream, title, ui_url)


@contextmanager
def watched_run(title: str, stop: StopRequest, *, ui_url: str | None = None,
                stream: TextIO | None = None) -> Iterator[LiveDisplay | LineDisplay]:
    """The display (stderr) of the run started in this block, which the
    command enters as the run's observer (judgeflow/run/entry.py); Ctrl-C asks
    the run to ``stop`` (the stop request its entry hands the run's gate) as
    the module doc says."""
    display = display_for(stream or sys.stderr, title, ui_url)
    with _ctrl_c_stops_the_run(stop, lambda: display.note(
        "stopping: no more claims; judge calls in flight finish and are stored, the rest is given back "
        "(Ctrl-C again quits at once; the next run takes a quit run's claims over)")):
        try:
            yield display
        finally:
            display.close()


@contextmanager
def _ctrl_c_stops_the_run(stop: StopRequest, on_stop: Callable[[], None]) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def again(signum, frame):
        signal.signal(signal.SIGINT, previous)
        raise KeyboardInterrupt

    def first(signum, frame):
        stop.request()
        signal.signal(signal.SIGINT, again)
        on_stop()

    signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
