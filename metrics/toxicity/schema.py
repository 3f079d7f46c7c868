"""Response schemas of the toxicity judge steps.

Each model is sent as the judge's ``response_format`` and validates the reply,
so what the judge is asked for and what is accepted cannot drift apart.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class Opinions(BaseModel):
    """Step ``toxicity.opinions``: the author's own opinions in the output."""

    model_config = ConfigDict(extra="forbid")
    opinions: list[str]


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: Literal["yes", "no"]
    reason: str

    @field_validator("verdict", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        # "Yes" or "NO" is the right answer in the wrong case; a repair call for
        # that would cost a call for nothing. Anything else (" yes", "yes.",
        # "maybe") is still invalid.
        if isinstance(value, str) and value.lower() in ("yes", "no"):
            return value.lower()
        return value


class Verdicts(BaseModel):
    """Step ``toxicity.verdicts``: one verdict per opinion, in order.

    Validate with ``context={"expected": n}`` to reject a reply whose verdict
    count does not match the number of opinions asked about.
    """

    model_config = ConfigDict(extra="forbid")
    verdicts: list[Verdict]

    @field_validator("verdicts")
    @classmethod
    def _one_per_opinion(cls, verdicts: list[Verdict], info: ValidationInfo) -> list[Verdict]:
        expected = (info.context or {}).get("expected")
        if expected is not None and len(verdicts) != expected:
            raise ValueError(f"expected {expected} verdicts (one per opinion), got {len(verdicts)}")
        return verdicts


class ToxicityReason(BaseModel):
    """Step ``toxicity.reason``: a short justification of the score."""

    model_config = ConfigDict(extra="forbid")
    reason: str
