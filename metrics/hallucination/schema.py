"""Response schema of the hallucination judge (one step, ``hallucination``)."""

from __future__ import annotations

from judgeflow.metrics.reply import ReplyModel
from pydantic import Field, field_validator


class HallucinationJudgement(ReplyModel):
    """Sent as ``response_format`` and used to validate the reply. The judge is
    asked for 0 or 1; the score it gives is stored as it is, and a score
    outside [0, 1] is an invalid reply (repaired), never clamped."""

    score: float = Field(ge=0.0, le=1.0)
    reason: list[str]

    @field_validator("reason", mode="before")
    @classmethod
    def _one_reason(cls, value: object) -> object:
        # A single string is one reason (Opik's parser takes the reason as text
        # in whatever shape it comes); re-asking to wrap it in a list would
        # cost a call for nothing.
        if isinstance(value, str):
            return [value]
        return value
