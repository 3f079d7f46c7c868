"""Where a provider's batch stands, as :class:`~judgeflow.judge.litellm_batches.LiteLLMBatches`
reads it; nothing here imports litellm, so the run can hold and store these."""

from __future__ import annotations

from dataclasses import dataclass

# the statuses of OpenAI's batch objects after which nothing changes
TERMINAL_STATUSES = frozenset({"completed", "failed", "expired", "cancelled"})
# a batch in one of these will answer nothing more; its pairs are free to be taken over
DEAD_STATUSES = frozenset({"failed", "expired", "cancelled"})


@dataclass(frozen=True)
class BatchStatus:
    id: str
    status: str  # validating, in_progress, finalizing, completed, failed, expired, cancelling, cancelled
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int | None = None  # Unix seconds, the provider's clock
    expires_at: int | None = None
    errors: tuple[str, ...] = ()  # why a batch failed as a whole (its file was refused), one line each

    @property
    def done(self) -> bool:
        """Nothing about the batch will change: its files are final."""
        return self.status in TERMINAL_STATUSES

    @property
    def dead(self) -> bool:
        return self.status in DEAD_STATUSES
