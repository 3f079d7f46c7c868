"""What a run tells people: log lines, a progress artifact while it runs, and
a summary table plus a markdown report when it ends. Artifact keys are stable
so the Prefect UI shows each as one artifact with a history of versions."""

from __future__ import annotations

import logging
from collections import Counter
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

from judgeflow.tasks.work import ScoreOutcome

log = logging.getLogger("judgeflow.reporting")

SUMMARY_KEY = "judgeflow-run-summary"
REPORT_KEY = "judgeflow-run-report"
PROGRESS_KEY = "judgeflow-run-progress"


class RunSummary(BaseModel):
    flow_run_id: str | None = None
    pending_at_start: int = 0
    traces: int = 0
    scored: int = 0
    skipped: int = 0
    failed: int = 0
    superseded: int = 0
    by_metric: dict[str, dict[str, int]] = Field(default_factory=dict)
    pass_rate: dict[str, float | None] = Field(default_factory=dict)
    judge_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    duration_s: float = 0.0
    failures: list[dict] = Field(default_factory=list)

    @classmethod
    def from_outcomes(
        cls, outcomes: list[ScoreOutcome], *, duration_s: float, flow_run_id: str | None, pending_at_start: int
    ) -> "RunSummary":
        statuses = Counter(o.status for o in outcomes)
        by_metric: dict[str, dict[str, int]] = {}
        pass_rate: dict[str, float | None] = {}
        for metric in sorted({o.metric for o in outcomes}):
            mine = [o for o in outcomes if o.metric == metric]
            counts = Counter(o.status for o in mine)
            judged = [o for o in mine if o.status == "scored"]
            by_metric[metric] = {
                "scored": counts["scored"], "skipped": counts["skipped"], "failed": counts["failed"],
                "passed": sum(1 for o in judged if o.passed),
            }
            pass_rate[metric] = (by_metric[metric]["passed"] / len(judged)) if judged else None
        costs = [o.cost_usd for o in outcomes if o.cost_usd is not None]
        return cls(
            flow_run_id=flow_run_id,
            pending_at_start=pending_at_start,
            traces=len({o.trace_id for o in outcomes}),
            scored=statuses["scored"], skipped=statuses["skipped"], failed=statuses["failed"],
            superseded=statuses["superseded"],
            by_metric=by_metric, pass_rate=pass_rate,
            judge_calls=sum(o.judge_calls for o in outcomes),
            prompt_tokens=sum(o.prompt_tokens for o in outcomes),
            completion_tokens=sum(o.completion_tokens for o in outcomes),
            cost_usd=round(sum(costs), 6) if costs else None,
            duration_s=round(duration_s, 2),
            failures=[
                {"trace_id": o.trace_id, "metric": o.metric, "kind": o.error_kind, "error": (o.error or "")[:200]}
                for o in outcomes
                if o.status == "failed"
            ][:20],
        )

    def table(self) -> list[dict]:
        def pct(value):
            return "n/a" if value is None else f"{value:.1%}"

        rows = [
            {"figure": "traces", "value": self.traces},
            {"figure": "scores written", "value": self.scored},
            {"figure": "skipped", "value": self.skipped},
            {"figure": "failed", "value": self.failed},
        ]
        for metric, rate in self.pass_rate.items():
            rows.append({"figure": f"{metric} pass rate", "value": pct(rate)})
        rows += [
            {"figure": "judge calls", "value": self.judge_calls},
            {"figure": "tokens (prompt / completion)", "value": f"{self.prompt_tokens} / {self.completion_tokens}"},
            {"figure": "cost (USD)", "value": "unknown" if self.cost_usd is None else f"{self.cost_usd:.4f}"},
            {"figure": "duration (s)", "value": self.duration_s},
        ]
        return rows

    def markdown(self) -> str:
        lines = ["# judgeflow run", "", "| figure | value |", "|---|---|"]
        lines += [f"| {r['figure']} | {r['value']} |" for r in self.table()]
        if self.failures:
            lines += ["", "## Failures (first 20)", "", "| trace | metric | kind | error |", "|---|---|---|---|"]
            for f in self.failures:
                error = f["error"].replace("|", "\\|").replace("\n", " ")
                lines.append(f"| {f['trace_id']} | {f['metric']} | {f['kind']} | {error} |")
        return "\n".join(lines)


@task(name="publish-run-summary", cache_policy=NO_CACHE, persist_result=False)
def publish_run_summary(summary: RunSummary) -> None:
    create_table_artifact(key=SUMMARY_KEY, table=summary.table(), description="judgeflow run summary")
    create_markdown_artifact(key=REPORT_KEY, markdown=summary.markdown(), description="judgeflow run report")
    log.info(
        "run done: %d traces, %d scored, %d skipped, %d failed, %d judge calls, cost %s, %.1fs",
        summary.traces, summary.scored, summary.skipped, summary.failed, summary.judge_calls,
        summary.cost_usd, summary.duration_s,
    )


class Progress:
    """A Prefect progress artifact plus a log line per batch."""

    def __init__(self, total: int):
        self.total = total
        self.done = 0
        self._artifact_id: UUID | None = None
        try:
            self._artifact_id = create_progress_artifact(
                progress=0.0, key=PROGRESS_KEY, description=f"judgeflow: {total} (trace, metric) pairs pending"
            )
        except Exception as error:  # progress display must never stop scoring
            log.warning("could not create progress artifact: %s", error)

    def advance(self, n: int, *, batch: int) -> None:
        self.done += n
        pct = 100.0 if not self.total else min(100.0, 100.0 * self.done / self.total)
        log.info("batch %d: %d/%d pairs done (%.0f%%)", batch, self.done, self.total, pct)
        if self._artifact_id is not None:
            try:
                update_progress_artifact(self._artifact_id, progress=pct)
            except Exception as error:
                log.warning("could not update progress artifact: %s", error)
