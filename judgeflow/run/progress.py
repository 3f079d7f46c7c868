"""A scoring run's figures as it goes, for whoever watches it in this process.

The flow runs in the process of the command that started it (``judgeflow
score``, ``backfill``): that command watches it by entering an observer with
its settings (``judgeflow.run.entry.entered(..., observer=...)``), and the run
reports its :class:`RunProgress` to it as batches finish. A run with no observer (a deployment on a worker, ``judgeflow
serve``) reports to no one. The figures are folded from the same outcomes as
the run summary, so the last report equals the summary's.

Nothing here imports Prefect."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Protocol

from judgeflow.run.entry import current_entry


@dataclass(frozen=True)
class RunProgress:
    total: int  # (trace, metric) pairs pending when the run started
    done: int = 0  # pairs with an outcome, whatever it is
    scored: int = 0
    skipped: int = 0
    failed: int = 0
    reused: int = 0  # of scored + skipped: copied from identical content
    left: int = 0  # superseded, taken over by another run, or given back (time budget, stop)
    judge_calls: int = 0
    cost_usd: float | None = None
    budget_usd: float | None = None
    flow_run_id: str | None = None
    started_at: float = field(default_factory=time.monotonic)

    @property
    def finished(self) -> int:
        """Pairs this run ended (scored, skipped, failed); ``left`` ones are not: another run scores them."""
        return self.done - self.left

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_at

    def add(self, outcomes: Iterable) -> "RunProgress":
        """These figures plus ``outcomes`` (judgeflow.model.ScoreOutcome)."""
        counts = {"scored": self.scored, "skipped": self.skipped, "failed": self.failed}
        done, reused, left, calls, cost = self.done, self.reused, self.left, self.judge_calls, self.cost_usd
        for o in outcomes:
            done += 1
            if o.status in counts:
                counts[o.status] += 1
            else:
                left += 1
            if o.reused and o.status in ("scored", "skipped"):
                reused += 1
            calls += o.judge_calls
            if o.cost_usd is not None:
                cost = (cost or 0.0) + o.cost_usd
        return replace(self, done=done, reused=reused, left=left, judge_calls=calls, cost_usd=cost, **counts)


class RunObserver(Protocol):
    def started(self, progress: RunProgress) -> None: ...

    def advanced(self, progress: RunProgress) -> None: ...

    def finished(self, progress: RunProgress) -> None: ...


def watch_batches(waits: Callable[[], list]) -> None:
    """Hand the observer of this run, when it shows them, what the run's batch judge waits on
    (``waits``: judgeflow.judge.batches.BatchJudge.waits, asked at each redraw)."""
    watch = getattr(current_observer(), "watch_batches", None)
    if watch is not None:
        watch(waits)


def current_observer() -> RunObserver | None:
    """Whoever the entry point of this run entered to watch it, if anyone."""
    entry = current_entry()
    return None if entry is None else entry.observer


class RunReporter:
    """The figures of one run for this context's observer, if any: started at
    creation, advanced by :meth:`add`, ended by :meth:`finish`. A failing
    observer is dropped (a display must never stop scoring)."""

    def __init__(self, total: int, *, flow_run_id: str | None = None, budget_usd: float | None = None):
        self.figures = RunProgress(total=total, flow_run_id=flow_run_id, budget_usd=budget_usd)
        self._observer = current_observer()
        self._notify("started")

    def add(self, outcomes: Iterable) -> None:
        self.figures = self.figures.add(outcomes)
        self._notify("advanced")

    def finish(self) -> None:
        self._notify("finished")

    def _notify(self, event: str) -> None:
        if self._observer is None:
            return
        try:
            getattr(self._observer, event)(self.figures)
        except Exception as error:
            import logging

            logging.getLogger("judgeflow.progress").warning("the run's progress display failed: %s", error)
            self._observer = None
