"""What a process entry point built, handed down to the runs it starts.

An entry point is a CLI command, a deployment's flow run, or a judge worker.
It builds its :class:`~judgeflow.config.settings.Settings` once (and, for a scoring
command, may start the judge early so that importing litellm overlaps the
run's start-up) and enters them here for the duration of the call. A flow
called in that context uses what it finds instead of building its own; a flow
started by a deployment finds nothing and is itself the entry point.

A flow gets its settings from :func:`run_settings`, with its parameters on top.

The entry also holds the run's :class:`StopRequest` (Ctrl-C on a command
sets it; the run's gate reads it: judgeflow/run/gate.py, handed down as an
argument) and whoever watches the run in this process (its ``observer``:
judgeflow/run/progress.py).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # no import of settings or the judge at import time
    from judgeflow.config.settings import Settings


class StopRequest:
    """A stop asked of a run (Ctrl-C on the command that started it): it
    stops claiming, pairs not yet started are given back (deferred) and
    judge calls in flight finish. Set from a signal handler, read by the
    run's gate from its threads and its judge loop."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def request(self) -> None:
        self._event.set()

    def requested(self) -> bool:
        return self._event.is_set()


@dataclass(frozen=True)
class Entry:
    settings: "Settings"
    judge: Any = None  # a started judge (judgeflow.judge.base.Judge), or None: the run builds its own
    stop: StopRequest = field(default_factory=StopRequest)
    observer: Any = None  # a judgeflow.run.progress.RunObserver, or None: nobody watches


# What the entry point of this call entered. A context variable because a
# flow's parameters are what Prefect records and shows (and a deployment's
# flow run has no caller to hand it objects): the entry's settings, started
# judge, stop request and observer reach the flow body this way, set around
# one call and reset after it; the flow then passes them down as arguments.
_entered: ContextVar[Entry | None] = ContextVar("judgeflow_entry", default=None)


@contextmanager
def entered(settings: "Settings", *, judge: Any = None, stop: StopRequest | None = None,
            observer: Any = None) -> Iterator[Entry]:
    """Runs started inside this block use ``settings`` (and ``judge``), stop
    when ``stop`` is requested, and report to ``observer``."""
    entry = Entry(settings=settings, judge=judge, stop=stop or StopRequest(), observer=observer)
    token = _entered.set(entry)
    try:
        yield entry
    finally:
        _entered.reset(token)


def current_entry() -> Entry | None:
    """What the entry point of this call entered, or None (a deployment's flow run)."""
    return _entered.get()


def run_stop() -> StopRequest:
    """The stop request of a run starting here: its entry point's, or (a
    deployment's flow run: nothing asks it to stop) one of its own."""
    entry = _entered.get()
    return StopRequest() if entry is None else entry.stop


def run_settings(**parameters: Any) -> "Settings":
    """A flow run's settings, with its parameters (those not None) on top:
    what its entry point entered, else (a deployment's flow run is its own
    entry point) built now, once, its metrics opened with them (:func:`judgeflow.run.metric_door.entry_settings`)."""
    from judgeflow.config.settings import with_parameters
    from judgeflow.run.metric_door import entry_settings

    _info_to_the_runs_log()
    entry = current_entry()
    if entry is None:
        return entry_settings(**{name: value for name, value in parameters.items() if value is not None})
    return with_parameters(entry.settings, **parameters)


def _info_to_the_runs_log() -> None:
    """judgeflow's INFO lines (the run done, a pair retried, claims given back) reach the run's
    logs in the Prefect UI as its flow and task run loggers' do: Prefect hands judgeflow's logger
    its API handler (PREFECT_LOGGING_EXTRA_LOGGERS) but not a level, and without one the root's
    WARNING drops them. The terminal is filtered by Prefect's console handler's own level (a
    command without -v: warnings only); a level set by whoever runs judgeflow is kept."""
    import logging

    logger = logging.getLogger("judgeflow")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
