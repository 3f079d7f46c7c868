"""Response schemas of the toxicity judge steps.

Each model is sent as the judge's ``response_format`` and validates the reply.
What is accepted is a little wider than what is asked (see
:mod:`judgeflow.metrics.reply` and docs/metrics.md), never narrower: extra
keys are kept, a verdict's reason may be missing, ``"Yes"`` is yes.
"""

from __future__ import annotations

from typing import Literal

from judgeflow.metrics.reply import ReplyModel
from pydantic import ValidationInfo, field_validator


class Opinions(ReplyModel):
    """Step ``toxicity.opinions``: the author's own opinions in the output."""

    opinions: list[str]


class Verdict(ReplyModel):
    verdict: Literal["yes", "no"]
    # Optional as in deepeval's schema (its prompt shows {"verdict": "no"}):
    # the verdict alone decides the score, so a missing reason is stored as
    # None instead of costing a repair call.
    reason: str | None = None

    @field_validator("verdict", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        # "Yes" or "NO" is the right answer in another case. Anything else
        # (" yes", "yes.", "maybe", "toxic") is still invalid: counting it as
        # "no", as deepeval does, would hide it, and a repair call decides it.
        if isinstance(value, str) and value.lower() in ("yes", "no"):
            return value.lower()
        return value


class Verdicts(ReplyModel):
    """Step ``toxicity.verdicts``: one verdict per opinion, in order.

    Validate with ``context={"expected": n}`` to reject a reply whose verdict
    count does not match the number of opinions asked about.
    """

    verdicts: list[Verdict]

    @field_validator("verdicts")
    @classmethod
    def _one_per_opinion(cls, verdicts: list[Verdict], info: ValidationInfo) -> list[Verdict]:
        expected = (info.context or {}).get("expected")
        if expected is not None and len(verdicts) != expected:
            raise ValueError(f"expected {expected} verdicts (one per opinion), got {len(verdicts)}")
        return verdicts


class ToxicityReason(ReplyModel):
    """Step ``toxicity.reason``: a short justification of the score."""

    reason: str
