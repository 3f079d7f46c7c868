"""What a process entry point built, handed down to the runs it starts.

An entry point is a CLI command, a deployment's flow run, or a judge worker.
It builds its :class:`~judgeflow.config.settings.Settings` once (and, for a scoring
command, may start the judge early so that importing litellm overlaps the
run's start-up) and enters them here for the duration of the call. A flow
called in that context uses what it finds instead of building its own; a flow
started by a deployment finds nothing and is itself the entry point.

A flow gets its settings from :func:`run_settings`, with its parameters on top.

The entry also holds its :class:`StopRequest`: Ctrl-C on a command asks the
runs it started to stop claiming (:func:`stop_requested`), and only those.

This is a context variable, not a process-wide global: it is set around one
call and reset after it, and Prefect runs tasks in a copy of the caller's
context, so a run's tasks see what its entry point entered.
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
    """A stop asked of the runs an entry point started (Ctrl-C on a command):
    they stop claiming, pairs not yet started are given back (deferred) and
    judge calls in flight finish. Set from a signal handler, read by the
    run's threads and its judge loop."""

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


_entered: ContextVar[Entry | None] = ContextVar("judgeflow_entry", default=None)


@contextmanager
def entered(settings: "Settings", *, judge: Any = None) -> Iterator[Entry]:
    """Runs started inside this block use ``settings`` (and ``judge``)."""
    entry = Entry(settings=settings, judge=judge)
    token = _entered.set(entry)
    try:
        yield entry
    finally:
        _entered.reset(token)


def current_entry() -> Entry | None:
    """What the entry point of this call entered, or None (a deployment's flow run)."""
    return _entered.get()


def stop_requested() -> bool:
    """Whether the entry point that started this run asked it to stop (a
    deployment's flow run has no entry here: nothing asks it to)."""
    entry = _entered.get()
    return entry is not None and entry.stop.requested()


def run_settings(**parameters: Any) -> "Settings":
    """A flow run's settings, with its parameters (those not None) on top:
    what its entry point entered, else (a deployment's flow run is its own
    entry point) built now, once (:func:`judgeflow.config.settings.run_settings`)."""
    from judgeflow.config.settings import run_settings as built_now, with_parameters

    entry = current_entry()
    if entry is None:
        return built_now(**parameters)
    return with_parameters(entry.settings, **parameters)
