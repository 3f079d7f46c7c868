"""What a run tells people: log lines, a progress artifact while it runs, and
a summary table plus a markdown report when it ends. Artifact keys are stable
so the Prefect UI shows each as one artifact with a history of versions."""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING
from uuid import UUID

from prefect import task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from judgeflow.metrics.registry import unit_of
from judgeflow.run.progress import RunReporter
from judgeflow.model import ScoreOutcome
from judgeflow.sources.session_id import is_session_id

if TYPE_CHECKING:
    from judgeflow.judge.base import Usage
    from judgeflow.judge.pricing import Prices
    from judgeflow.tasks.session_rates import SessionRates

log = logging.getLogger("judgeflow.reporting")

SUMMARY_KEY = "judgeflow-run-summary"
REPORT_KEY = "judgeflow-run-report"
PROGRESS_KEY = "judgeflow-run-progress"


# figures only a run that judged knows (a sharded night's parent judged nothing: its children did)
_CHILD_ONLY = ("reused (identical content, no judge call)", "taken over by another run", "left to other live runs")


class RunSummary(BaseModel):
    flow_run_id: str | None = None
    pending_at_start: int = 0
    traces: int = 0
    # sessions whose results this run wrote (a session metric, a trace metric's session rate): counted apart
    # from traces, each once
    sessions: int = 0
    scored: int = 0
    skipped: int = 0
    failed: int = 0
    superseded: int = 0
    reused: int = 0  # results copied from identical content, no judge call
    taken_over: int = 0
    # pairs in this run's scope that other live runs still held when it ended:
    # {flow run id: pairs}; None when the database could not say
    left_to_other_runs: dict[str, int] | None = Field(default_factory=dict)
    deferred: int = 0  # claimed but left for the next run: the time budget ran out
    by_metric: dict[str, dict[str, int]] = Field(default_factory=dict)
    pass_rate: dict[str, float | None] = Field(default_factory=dict)
    judge_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache
    cost_usd: float | None = None
    # a batch run (JUDGEFLOW_JUDGE_BATCH): its results' usage at the online prices; None otherwise
    online_cost_usd: float | None = None
    duration_s: float = 0.0
    failures: list[dict] = Field(default_factory=list)
    # run budget (JUDGEFLOW_RUN_BUDGET_USD); left_pending is counted when it ran out
    budget_usd: float | None = None
    budget_spent_usd: float | None = None
    budget_exhausted: bool = False
    left_pending: int | None = None
    # stopped on request (Ctrl-C in the command that runs it): no claims after it
    stopped: bool = False
    # a sharded night's parent cancelled through Prefect (the UI's Cancel): stopped, and said so
    cancelled: bool = False

    def budget_line(self) -> str | None:
        if self.budget_usd is None:
            return None
        spent = f"${self.budget_spent_usd or 0.0:.4f} of ${self.budget_usd:.4f} spent"
        if not self.budget_exhausted:
            return spent
        return (f"{spent}; budget exhausted: the run stopped claiming, "
                f"{self.left_pending if self.left_pending is not None else 'some'} (trace, metric) pairs left pending")
    # source rows no run can score (NULL id / created_at) or that repeat an id;
    # None when they could not be counted
    # counted over the rows the run read (null_created_at None: a window has no NULL times)
    unusable_rows: dict[str, int | None] | None = None
    notes: list[str] = Field(default_factory=list)  # what people should know, e.g. how to list those rows
    # judge epochs this run started (a new judge model or metric version), one line each
    judge_epochs: list[str] = Field(default_factory=list)
    # a sharded night's parent: one row per child flow run (judgeflow/run/shards.py), its figures read
    # from the database; the parent's own figures are their sums
    shards: list[dict] = Field(default_factory=list)

    @classmethod
    def from_outcomes(
        cls, outcomes: list[ScoreOutcome], *, duration_s: float, flow_run_id: str | None, pending_at_start: int
    ) -> "RunSummary":
        builder = SummaryBuilder()
        builder.add(outcomes)
        return builder.build(duration_s=duration_s, flow_run_id=flow_run_id, pending_at_start=pending_at_start)

    @property
    def left_to_other_pairs(self) -> int | str:
        if self.left_to_other_runs is None:
            return "unknown"
        return sum(self.left_to_other_runs.values())

    def table(self) -> list[dict]:
        def pct(value):
            return "n/a" if value is None else f"{value:.1%}"

        rows = [
            {"figure": "traces", "value": self.traces},
            *([{"figure": "sessions", "value": self.sessions}] if self.sessions else []),
            {"figure": "scores written", "value": self.scored},
            {"figure": "skipped", "value": self.skipped},
            {"figure": "failed", "value": self.failed},
            {"figure": "reused (identical content, no judge call)", "value": self.reused},
            # judged here, but the pair's claim had moved to another run: its result stands
            {"figure": "superseded", "value": self.superseded},
            # the claim had moved to another run before this one judged the pair
            {"figure": "taken over by another run", "value": self.taken_over},
            {"figure": "left to other live runs", "value": self.left_to_other_pairs},
        ]
        if self.shards:  # the parent's figures are what its children stored; these only each child knew
            rows = [row for row in rows if row["figure"] not in _CHILD_ONLY]
        if self.deferred:
            why = "stopped" if self.stopped else "time budget"
            rows.append({"figure": f"left for the next run ({why})", "value": self.deferred})
        if self.unusable_rows is not None:
            u = self.unusable_rows
            rows.append({"figure": "source rows skipped (NULL id / NULL created_at)",
                         "value": f"{u.get('null_id', 0)} / "
                                  f"{'not counted' if u.get('null_created_at') is None else u['null_created_at']}"})
            rows.append({"figure": "duplicate ids (extra copies ignored)",
                         "value": f"{u.get('duplicate_ids', 0)} ({u.get('duplicate_copies', 0)})"})
        for metric, rate in self.pass_rate.items():
            unit = " (sessions)" if unit_of(metric) == "sessions" else ""
            rows.append({"figure": f"{metric} pass rate{unit}", "value": pct(rate)})
        rows += [
            {"figure": "judge calls", "value": self.judge_calls},
            {"figure": "tokens (prompt / completion)", "value": f"{self.prompt_tokens} / {self.completion_tokens}"},
            {"figure": "cached prompt tokens", "value": self.cached_tokens},
            # no call billed is a known nothing; calls without a price are unknown
            {"figure": "cost (USD)", "value": "unknown" if self.cost_usd is None and self.judge_calls
             else f"{self.cost_usd or 0.0:.4f}"},
            {"figure": "duration (s)", "value": self.duration_s},
        ]
        if self.online_cost_usd is not None:
            rows.insert(-1, {"figure": "cost online (USD, the same tokens at the online prices)",
                             "value": f"{self.online_cost_usd:.4f}"})
        if self.budget_usd is not None:
            rows.append({"figure": "budget (USD)", "value": self.budget_line()})
        return rows

    def markdown(self) -> str:
        lines = ["# judgeflow run", ""]
        if self.cancelled:
            lines += ["**Cancelled.** The night's flow run was cancelled through Prefect: its shards were "
                      "cancelled; what they stored stays, the rest is pending for the next run.", ""]
        elif self.stopped:
            lines += ["**Stopped (Ctrl-C).** The run claimed no more; judge calls in flight finished and were "
                      "stored; pairs not started were given back: the next run scores them.", ""]
        if self.budget_exhausted:
            lines += [f"**Budget exhausted.** {self.budget_line()}; the next run scores them.", ""]
        if self.judge_epochs:  # said once, each metric's new epoch under it
            lines += ["**Judge changed.**", "", *[f"- {started}" for started in self.judge_epochs], ""]
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {r['figure']} | {r['value']} |" for r in self.table()]
        if self.shards:
            lines += ["", "## Shards", "", "| " + " | ".join(self.shards[0]) + " |",
                      "|" + "---|" * len(self.shards[0])]
            lines += ["| " + " | ".join("" if v is None else str(v) for v in row.values()) + " |"
                      for row in self.shards]
        if self.left_to_other_runs:
            lines += ["", "## Left to other live runs", "", "| flow run | pairs |", "|---|---|"]
            lines += [f"| {run} | {n} |" for run, n in self.left_to_other_runs.items()]
        elif self.left_to_other_runs is None:
            lines += ["", "Whether other runs still hold pairs of this run's scope is unknown (the database "
                      "could not be asked)."]
        if self.notes:
            lines += ["", "## Notes", ""] + [f"- {note}" for note in self.notes]
        if self.failures:
            lines += ["", "## Failures (first 20)", "", "| trace | metric | kind | error |", "|---|---|---|---|"]
            for f in self.failures:
                error = f["error"].replace("|", "\\|").replace("\n", " ")
                lines.append(f"| {f['trace_id']} | {f['metric']} | {f['kind']} | {error} |")
        return "\n".join(lines)


class SummaryBuilder:
    """Folds outcomes into the run's figures batch by batch, so a run holds
    counters (and the distinct trace ids), never every outcome."""

    MAX_FAILURES = 20

    def __init__(self) -> None:
        self._trace_ids: set[str] = set()
        self._session_ids: set[str] = set()  # a session's results: counted as sessions, not traces
        self._statuses: Counter = Counter()
        self._by_metric: dict[str, Counter] = {}
        self._judge_calls = self._prompt_tokens = self._completion_tokens = self._cached_tokens = 0
        self._metric_tokens: dict[str, list[int]] = {}  # metric -> [prompt, completion, cached]
        self._cost: float | None = None
        self._failures: list[dict] = []

    def add(self, outcomes: list[ScoreOutcome]) -> None:
        for o in outcomes:
            (self._session_ids if is_session_id(o.trace_id) else self._trace_ids).add(o.trace_id)
            self._statuses[o.status] += 1
            if o.reused and o.status in ("scored", "skipped"):
                self._statuses["reused"] += 1
            counts = self._by_metric.setdefault(o.metric, Counter())
            counts[o.status] += 1
            if o.status == "scored" and o.passed:
                counts["passed"] += 1
            self._judge_calls += o.judge_calls
            self._prompt_tokens += o.prompt_tokens
            self._completion_tokens += o.completion_tokens
            self._cached_tokens += o.cached_tokens
            tokens = self._metric_tokens.setdefault(o.metric, [0, 0, 0])
            tokens[0] += o.prompt_tokens
            tokens[1] += o.completion_tokens
            tokens[2] += o.cached_tokens
            if o.cost_usd is not None:
                self._cost = (self._cost or 0.0) + o.cost_usd
            if o.status == "failed" and len(self._failures) < self.MAX_FAILURES:
                self._failures.append(
                    {"trace_id": o.trace_id, "metric": o.metric, "kind": o.error_kind, "error": (o.error or "")[:200]}
                )

    def add_session_rates(self, rates: "SessionRates") -> None:
        """Fold in the session rates the run stored (:mod:`judgeflow.tasks.session_rates`): no judge calls."""
        self._session_ids |= set(rates.sessions)
        for metric, (scored, passed) in rates.by_metric.items():
            counts = self._by_metric.setdefault(metric, Counter())
            counts["scored"] += scored
            counts["passed"] += passed
            self._statuses["scored"] += scored

    def less_paid_before(self, prepaid: "dict[str, Usage]") -> None:
        """Leave out what earlier runs paid for (metric -> its usage): answers they collected that
        this run read again from the record for the pairs it stored (judgeflow/judge/batches.py).
        The rows carry that cost; the summary says what this run billed."""
        for metric, usage in prepaid.items():
            self._judge_calls -= usage.calls
            self._prompt_tokens -= usage.prompt_tokens
            self._completion_tokens -= usage.completion_tokens
            self._cached_tokens -= usage.cached_tokens
            tokens = self._metric_tokens.setdefault(metric, [0, 0, 0])
            tokens[0] -= usage.prompt_tokens
            tokens[1] -= usage.completion_tokens
            tokens[2] -= usage.cached_tokens
            if usage.cost_usd is not None:
                self._cost = max(0.0, (self._cost or 0.0) - usage.cost_usd)

    def cost_at(self, prices: "Prices") -> float:
        """USD the tokens counted so far cost at ``prices`` (each metric at its own), cached ones at its cached
        rate: what a batch run's usage would have cost online. Attempts that brought no usage back count none."""
        return sum(prices.of(metric).cost(*tokens) for metric, tokens in self._metric_tokens.items())

    def build(
        self, *, duration_s: float, flow_run_id: str | None, pending_at_start: int,
        left_to_other_runs: dict[str, int] | None = {},  # noqa: B006 - read only
    ) -> RunSummary:
        by_metric: dict[str, dict[str, int]] = {}
        pass_rate: dict[str, float | None] = {}
        for metric in sorted(self._by_metric):
            counts = self._by_metric[metric]
            by_metric[metric] = {
                "scored": counts["scored"], "skipped": counts["skipped"], "failed": counts["failed"],
                "passed": counts["passed"],
            }
            pass_rate[metric] = (counts["passed"] / counts["scored"]) if counts["scored"] else None
        return RunSummary(
            flow_run_id=flow_run_id,
            pending_at_start=pending_at_start,
            traces=len(self._trace_ids),
            sessions=len(self._session_ids),
            scored=self._statuses["scored"], skipped=self._statuses["skipped"], failed=self._statuses["failed"],
            superseded=self._statuses["superseded"], taken_over=self._statuses["taken_over"],
            deferred=self._statuses["deferred"],
            reused=self._statuses["reused"],
            left_to_other_runs=None if left_to_other_runs is None else dict(left_to_other_runs),
            by_metric=by_metric, pass_rate=pass_rate,
            judge_calls=self._judge_calls,
            prompt_tokens=self._prompt_tokens,
            completion_tokens=self._completion_tokens,
            cached_tokens=self._cached_tokens,
            cost_usd=round(self._cost, 6) if self._cost is not None else None,
            duration_s=round(duration_s, 2),
            failures=list(self._failures),
        )


# retries=0: the summary is also returned; the artifact is a view
@task(name="publish-run-summary", cache_policy=NO_CACHE, persist_result=False, retries=0)
def publish_run_summary(summary: RunSummary) -> None:
    create_table_artifact(key=SUMMARY_KEY, table=summary.table(), description="judgeflow run summary")
    create_markdown_artifact(key=REPORT_KEY, markdown=summary.markdown(), description="judgeflow run report")
    log.info(
        "run done: %d traces, %d scored, %d skipped, %d failed, %d superseded, %s left to other live runs, "
        "%d judge calls, cost %s, %.1fs",
        summary.traces, summary.scored, summary.skipped, summary.failed, summary.superseded,
        summary.left_to_other_pairs, summary.judge_calls, summary.cost_usd, summary.duration_s,
    )


BUDGET_EXHAUSTED_EVENT = "judgeflow.run.budget-exhausted"


# retries=0: never fails; the event is a notice
@task(name="announce-budget-exhausted", cache_policy=NO_CACHE, persist_result=False, retries=0)
def announce_budget_exhausted(summary: RunSummary) -> str | None:
    """The Prefect event ``judgeflow.run.budget-exhausted`` about the flow run,
    for automations (e.g. notify whoever owns the budget). Never fails the run."""
    log.warning("run budget exhausted: %s", summary.budget_line())
    try:
        from prefect.events import emit_event

        event = emit_event(
            event=BUDGET_EXHAUSTED_EVENT,
            resource={"prefect.resource.id": f"prefect.flow-run.{summary.flow_run_id}"},
            payload={
                "budget_usd": summary.budget_usd, "spent_usd": summary.budget_spent_usd,
                "left_pending": summary.left_pending, "scored": summary.scored, "failed": summary.failed,
            },
        )
    except Exception as error:
        log.warning("could not emit %s: %s", BUDGET_EXHAUSTED_EVENT, error)
        return None
    return None if event is None else str(event.id)


class Progress:
    """A Prefect progress artifact plus a log line, at most once per ``every``
    pairs done (a batch's worth), however the pairs arrive. The artifact is
    created by :meth:`show` (or the first :meth:`advance`): the flow shows it
    once its first batch is judging, so that API call does not delay the
    run's first judge call. Whoever watches the run in this process (the
    CLI's display, judgeflow/run/progress.py) gets the figures at every batch."""

    def __init__(self, total: int, *, every: int = 100, flow_run_id: str | None = None,
                 budget_usd: float | None = None):
        self.total = total
        self._reporter = RunReporter(total, flow_run_id=flow_run_id, budget_usd=budget_usd)
        self._every = max(1, every)
        self._reported = 0
        self._artifact_id: UUID | None = None
        self._shown = False

    @property
    def done(self) -> int:
        return self._reporter.figures.done

    def finish(self) -> None:
        self._reporter.finish()

    def show(self) -> None:
        if self._shown:
            return
        self._shown = True
        try:
            self._artifact_id = create_progress_artifact(
                progress=0.0, key=PROGRESS_KEY, description=f"judgeflow: {self.total} (trace, metric) pairs pending"
            )
        except Exception as error:  # progress display must never stop scoring
            log.warning("could not create progress artifact: %s", error)

    def advance(self, outcomes: list[ScoreOutcome], *, batch: int) -> None:
        self.show()
        self._reporter.add(outcomes)
        if self.done - self._reported < self._every and self.done < self.total:
            return
        self._reported = self.done
        pct = 100.0 if not self.total else min(100.0, 100.0 * self.done / self.total)
        log.info("batch %d: %d/%d pairs done (%.0f%%)", batch, self.done, self.total, pct)
        if self._artifact_id is not None:
            try:
                update_progress_artifact(self._artifact_id, progress=pct)
            except Exception as error:
                log.warning("could not update progress artifact: %s", error)
