"""The one result type every metric returns."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

ResultStatus = Literal["scored", "skipped"]


class MetricResult(BaseModel):
    """Outcome of scoring one trace with one metric.

    ``score`` is in [0, 1] where higher is worse for both metrics (share of toxic
    opinions; degree of unfaithfulness), so ``passed`` means ``score <= threshold``.
    A 'skipped' result (the judge abstained) has ``score`` and ``passed`` None and
    says why in ``reason``. Failures are not results: they raise a
    :class:`~judgeflow.errors.JudgeflowError`.
    """

    name: str
    status: ResultStatus = "scored"
    score: float | None = Field(None, ge=0.0, le=1.0)
    passed: bool | None = None
    threshold: float
    reason: str | None = None
    # Intermediate steps: opinions and verdicts for toxicity, reasons for
    # hallucination, plus input notes such as which fields were truncated.
    details: dict[str, Any] = Field(default_factory=dict)
    judge_model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the provider served from its cache (part of prompt_tokens)
    cost_usd: float | None = None
    latency_ms: float = 0.0
    judge_calls: int = 0
    metric_version: str
