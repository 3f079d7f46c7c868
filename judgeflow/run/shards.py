"""A night in shards: the child flow runs' names and idempotency keys, what
each child did as the database holds it, and the parent's one summary of them.
No Prefect, no database: the tasks in ``tasks/shards.py`` hand it what they read."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# the deployment the parent starts its children from (deployments/prefect.yaml, `judgeflow serve`)
SHARD_FLOW = "score-shard"
SHARD_DEPLOYMENT = "shards"
LOST_STATES = ("CRASHED", "FAILED", "CANCELLED")

# what a parent may not hand its children: a night through the batch API runs in one process (the
# budgets and --limit are the night's: judgeflow/db/night_ledger.py)
NOT_WITH_SHARDS = {
    "judge_batch": "the batch API (--batch, JUDGEFLOW_JUDGE_BATCH)",
}


def refusal(shards: int, **set_values: Any) -> str | None:
    """One line saying why a night in ``shards`` cannot run with what is set, or None."""
    if shards < 1:
        return f"--shards must be at least 1 (got {shards})"
    if shards == 1:
        return None
    clashing = [what for name, what in NOT_WITH_SHARDS.items() if set_values.get(name) not in (None, False)]
    if not clashing:
        return None
    return (f"--shards {shards} cannot run with {', '.join(clashing)}: its batches are sent and collected by "
            "one run; run with one shard, or without it")


def shard_run_name(night: datetime, shard: int, shards: int, *, takeover: bool = False) -> str:
    """What the UI calls a child: which night and which shard (and a lost shard's take-over)."""
    return f"score-new-traces/{night:%Y-%m-%d} shard {shard} of {shards}" + (" take-over" if takeover else "")


def shard_key(parent_run_id: str, shard: int, shards: int, *, takeover: bool = False) -> str:
    """The child's idempotency key: a retried parent (same flow run id) gets its children back, not a second set."""
    return f"judgeflow-shard:{parent_run_id}:{shard}-of-{shards}" + (":take-over" if takeover else "")


@dataclass
class ShardReport:
    """One child at its end: its flow run's final state and time, and its results as the database holds them."""

    shard: int
    flow_run_id: str
    state: str  # the state type: COMPLETED, CRASHED, FAILED, CANCELLED
    state_name: str
    duration_s: float | None
    statuses: dict[str, int] = field(default_factory=dict)  # eval_results rows it wrote: status -> count
    judge_calls: int = 0
    cost_usd: float = 0.0
    tokens: list[int] = field(default_factory=lambda: [0, 0, 0])  # prompt, completion, cached
    superseded: int = 0
    takeover: bool = False  # started by the parent for a lost shard, once its children had ended

    @property
    def lost(self) -> bool:
        return self.state in LOST_STATES

    def row(self, shards: int) -> dict[str, Any]:
        return {
            "shard": f"{self.shard} of {shards}" + (" take-over" if self.takeover else ""), "flow run": self.flow_run_id, "state": self.state_name,
            "scored": self.statuses.get("scored", 0), "skipped": self.statuses.get("skipped", 0),
            "failed": self.statuses.get("failed", 0), "judge calls": self.judge_calls,
            "cost usd": round(self.cost_usd, 6),
            "time s": None if self.duration_s is None else round(self.duration_s, 1),
        }


def lost_note(report: ShardReport, shards: int) -> str:
    which = "take-over of shard" if report.takeover else "shard"
    then = ("are left pending for the next run" if report.takeover else
            "were taken over by the other shards or by a take-over run of this shard, started when they had ended")
    return (f"{which} {report.shard} of {shards} (flow run {report.flow_run_id}) ended {report.state_name}: "
            f"the {sum(report.statuses.values())} result(s) it stored stay; the pairs it held {then}")


def night_totals(reports: list[ShardReport]) -> dict[str, Any]:
    """The night's figures, summed over its children's stored results."""
    statuses: dict[str, int] = {}
    for report in reports:
        for status, count in report.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    return {
        "scored": statuses.get("scored", 0), "skipped": statuses.get("skipped", 0),
        "failed": statuses.get("failed", 0), "superseded": sum(r.superseded for r in reports),
        "judge_calls": sum(r.judge_calls for r in reports),
        "prompt_tokens": sum(r.tokens[0] for r in reports),
        "completion_tokens": sum(r.tokens[1] for r in reports),
        "cached_tokens": sum(r.tokens[2] for r in reports),
        "cost_usd": round(sum(r.cost_usd for r in reports), 6),
    }
