"""Response schema of the hallucination judge (one step, ``hallucination``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class HallucinationJudgement(BaseModel):
    """Sent as ``response_format`` and used to validate the reply: a score
    outside [0, 1] is an invalid reply, never clamped."""

    model_config = ConfigDict(extra="forbid")
    score: float = Field(ge=0.0, le=1.0)
    reason: list[str]
