"""Reply schemas of a G-Eval metric: the score step and the one-off step that
writes evaluation steps from the criteria."""

from __future__ import annotations

from pydantic import Field, field_validator

from judgeflow.metrics.reply import ReplyModel

# how many evaluation steps a generated list may hold: G-Eval asks for 3 to 4
MAX_STEPS = 12
MAX_STEP_CHARS = 500


class GEvalScore(ReplyModel):
    """The judge's answer, as deepeval's and Opik's G-Eval ask for it: an integer
    from 0 to 10 (higher: the criteria are better met) and the reason. A score
    outside 0..10, or with a fraction, is an invalid reply (repaired), never
    rounded or clamped."""

    score: int = Field(ge=0, le=10, strict=False)
    reason: str

    @field_validator("score", mode="before")
    @classmethod
    def _whole_number(cls, value: object) -> object:
        # "7" and 7.0 mean 7; 7.5 and true do not
        if isinstance(value, bool):
            raise ValueError("score must be an integer from 0 to 10, not a boolean")
        if isinstance(value, float) and not value.is_integer():
            raise ValueError("score must be an integer from 0 to 10")
        return value

    @field_validator("reason", mode="before")
    @classmethod
    def _reason_text(cls, value: object) -> object:
        # several reasons are one reason: re-asking to join them would cost a call for nothing
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return " ".join(item.strip() for item in value if item.strip())
        return value


class GEvalSteps(ReplyModel):
    """Evaluation steps written by the judge from a metric's criteria."""

    steps: list[str] = Field(min_length=1, max_length=MAX_STEPS)

    @field_validator("steps")
    @classmethod
    def _plain_steps(cls, value: list[str]) -> list[str]:
        steps = [step.strip() for step in value]
        if any(not step or len(step) > MAX_STEP_CHARS for step in steps):
            raise ValueError(f"each step must be a non-empty sentence of at most {MAX_STEP_CHARS} characters")
        return steps
