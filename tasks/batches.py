"""A run's judge through the provider's batch API: built, its batches recorded and shown.

``start-batch-judge`` builds the run's :class:`~judgeflow.judge.batches.BatchJudge`
over the adapter's batch calls, with the run's :class:`RunBatchLedger`: each
batch and its lines recorded in its own transaction before the run waits on it
(judgeflow/db/judge_batches.py), each answer of the provider recorded as it
comes, and the run's table of batches (id, round, lines, counts, status)
published as a Prefect table artifact on the flow run, a new version at each
change. The judge waits while the run's policy lets it (a stop, the time budget:
judgeflow/run/policy.py).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.config.settings import Settings
from judgeflow.db import judge_batches
from judgeflow.judge.base import JudgeReply
from judgeflow.judge.batch_lines import CREATING, BatchLine, LineOnRecord
from judgeflow.judge.batches import BatchJudge, Waiting
from judgeflow.judge.factory import batch_api, judge_config
from judgeflow.run.policy import RunPolicy

log = logging.getLogger("judgeflow.batches")

BATCHES_KEY = "judge-batches"


class RunBatchLedger:
    """The record of one run's batches (judgeflow/db/judge_batches.py) and its table of them."""

    def __init__(self, settings: Settings, owner: str, flow_run_id: str | None, provider: str) -> None:
        self.settings, self.owner, self.flow_run_id, self.provider = settings, owner, flow_run_id, provider

    def intend(self, token: str, round_no: int, model: str, lines: list[BatchLine]) -> None:
        expires = datetime.now(timezone.utc) + timedelta(seconds=self.settings.judge_batch_window_s)
        judge_batches.record_batch(self.settings, judge_batches.BatchRecord(
            batch_id=token, provider=self.provider, model=model, round=round_no, owner=self.owner,
            status=CREATING, expires_at=expires), lines)

    def adopt(self, token: str, batch_id: str) -> None:
        judge_batches.adopt_batch(self.settings, token, batch_id)

    def drop(self, token: str) -> None:
        judge_batches.drop_intent(self.settings, token)

    def lines_on_record(self, custom_ids: list[str]) -> dict[str, LineOnRecord]:
        return judge_batches.lines_on_record(self.settings, custom_ids)

    def collected(self, batch_id: str, custom_ids: list[str]) -> None:
        judge_batches.mark_collected(self.settings, batch_id, custom_ids)

    def answered_online(self, line: BatchLine, reply: JudgeReply) -> None:
        judge_batches.record_online_answer(self.settings, line, reply)

    def update(self, status: Any) -> None:
        judge_batches.update_batch(self.settings, status.id, status.status, status.completed, status.failed)

    def show(self, rows: list[dict[str, Any]]) -> None:
        """A new version of the run's table of batches, on the flow run (never fails the run)."""
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.actions import ArtifactCreate

        try:
            with get_client(sync_client=True) as client:
                client.create_artifact(ArtifactCreate(
                    key=BATCHES_KEY, type="table", data=[dict(row) for row in rows],
                    description=f"the judge's batches of this run: {len(rows)}",
                    flow_run_id=UUID(self.flow_run_id) if self.flow_run_id else None))
        except Exception as error:  # noqa: BLE001 - the record is the database's; the UI table is a convenience
            log.warning("could not publish the table of batches: %s", error)


def batch_waiting(settings: Settings, policy: RunPolicy, *, cancel_on_stop: bool) -> Waiting:
    """How the run waits on its batches: until its policy says it may not go on (a stop, the time budget)."""
    def why_stop() -> str | None:
        refusal = policy.why_not_run()
        return None if refusal is None else refusal.why

    return Waiting(why_stop=why_stop, poll_s=settings.judge_batch_poll_s, poll_max_s=settings.judge_batch_poll_max_s,
                   settle_s=settings.judge_batch_settle_s, cancel_on_stop=cancel_on_stop,
                   line_retry_online=settings.judge_batch_line_retry == "online")


# retries=0: building the judge asks nobody; its lines are retried by the call level
@task(name="start-batch-judge", cache_policy=NO_CACHE, persist_result=False, retries=0)
def start_batch_judge(settings: Settings, policy: RunPolicy, owner: str, flow_run_id: str | None, *,
                      cancel_on_stop: bool = False) -> BatchJudge:
    """The run's judge when it sends its calls through the batch API (the module doc)."""
    config = judge_config(settings)
    api = batch_api(config, max_lines=settings.judge_batch_max_lines,
                    max_bytes=int(settings.judge_batch_max_mb * 1024 * 1024))
    provider = config.model.split("/", 1)[0] if "/" in config.model else "openai"  # litellm's default provider
    return BatchJudge(api, RunBatchLedger(settings, owner, flow_run_id, provider), model=config.model,
                      waiting=batch_waiting(settings, policy, cancel_on_stop=cancel_on_stop), retry=config.retry)


def paid_before(judge: Any) -> tuple[dict, list[str]]:
    """What answers an earlier run paid for cost, read again by this run's judge (metric -> usage: left
    out of this run's summary, judgeflow/judge/batches.py), and its note; nothing for another judge."""
    prepaid = judge.prepaid if isinstance(judge, BatchJudge) else {}
    if not prepaid:
        return {}, []
    calls = sum(usage.calls for usage in prepaid.values())
    costs = [usage.cost_usd for usage in prepaid.values() if usage.cost_usd is not None]
    cost = f" (${sum(costs):.4f})" if costs else ""
    return prepaid, [f"{calls} judge answer(s) an earlier run paid for{cost} were read again from the record, "
                     "not sent: on the results stored, not in this run's cost"]


def batches_left_out(judge: Any) -> list[str]:
    """The run's last word on its batches: what is still out, for its summary."""
    if not isinstance(judge, BatchJudge) or not judge.left_out:
        return []
    ids = ", ".join(sorted(judge.left_out))
    why = sorted(set(judge.left_out.values()))
    lines = sum(judge.left_lines.values())
    fate = ("cancelled: the provider bills the lines it answered before the cancel; the next "
            "`judgeflow score --batch` reads those from the batch and sends only the rest again"
            if judge.waiting.cancel_on_stop else
            "the provider bills them as it answers them; `judgeflow score --batch` collects and stores them "
            "without sending them again")
    return [f"{len(judge.left_out)} judge batch(es) still out ({ids}): the run stopped waiting "
            f"({'; '.join(why)}) on {lines} line(s), not in this run's cost: {fate}"]
