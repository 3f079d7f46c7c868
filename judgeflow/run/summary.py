"""What a scoring run's summary says beyond its totals: its notes in words, and the online price of a batch run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from judgeflow.judge.pricing import prices_for
from judgeflow.sources.trace_source import trace_source
from judgeflow.sources.unusable import describe as describe_unusable

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings


def time_budget_spent(settings: "Settings", elapsed_s: float) -> str:
    return (f"time budget spent (JUDGEFLOW_MAX_RUN_DURATION={settings.max_run_duration}, {elapsed_s:.0f}s "
            "elapsed): no more claims; pairs in flight finish their current judge call, start no new attempt, "
            "and what is left stays pending for the next run")


def stopped_early(error: BaseException) -> str:
    """A run an infrastructure failure stopped part-way (the database gone for longer than the retries ride out)."""
    return (f"the run stopped early ({type(error).__name__}: {error}); "
            "pairs it did not score are left for the next run")


def unusable_notes(settings: "Settings", unusable: Any) -> list[str]:
    """The source's rows no run can use (``unusable``: their count, None when they could not be counted)."""
    if unusable is None:
        return ["unusable source rows (NULL id / created_at, duplicate ids) could not be counted; "
                "see the run log and `judgeflow db check`"]
    return describe_unusable(trace_source(settings), unusable)


def deferred_note(settings: "Settings", deferred: int, stopped: bool = False) -> str:
    """What the pairs a run left for the next one were doing; ``stopped``: by a stop request (Ctrl-C)."""
    waiting = ", or were left waiting in a judge batch still out" if settings.judge_batch else ""
    if stopped:
        return (f"{deferred} claimed pair(s) were not started or not finished when the run was stopped"
                f"{waiting}, and were given back for the next run")
    return (f"{deferred} claimed pair(s) were not started before the time budget ran out, or not retried once "
            f"the spend budget had no room{waiting}, and were given back for the next run")


def online_cost(settings: "Settings", totals: Any) -> float | None:
    """A batch run's usage at the online prices (what the same night would
    have cost online; ``totals``: its SummaryBuilder); None otherwise."""
    prices = prices_for(settings, online=True) if settings.judge_batch else None
    return None if prices is None else round(totals.cost_at(prices), 6)
