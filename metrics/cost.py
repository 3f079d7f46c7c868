"""What a pending (trace, metric) pair is expected to cost: its tokens, from
the length of its text by the metric's declared cost (:class:`CostEstimate`,
measured by rendering its prompts for short and long traces) at ~4 characters
per token, and their price at the prices it is judged at. Used by run budgets,
sample plans, backfill and calibration estimates and status."""

from __future__ import annotations

import json
from typing import Any, Protocol

from judgeflow.metrics.registry import spec_of

CHARS_PER_TOKEN = 4.0


class MetricPrices(Protocol):
    """Prices per metric (``judgeflow.judge.pricing.Prices``: the judge prices, metrics do not)."""

    def of(self, metric: str) -> Any: ...


def _chars(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False, default=str))


def estimate_tokens(metric: str, *, input_chars: float, output_chars: float,
                    context_chars: float, max_field_chars: int | None = None) -> tuple[float, float]:
    """(prompt, completion) tokens one (trace, metric) pair is expected to cost."""
    if max_field_chars is not None:  # metrics truncate each field to this budget
        input_chars, output_chars, context_chars = (min(c, max_field_chars)
                                                    for c in (input_chars, output_chars, context_chars))
    cost = spec_of(metric).cost
    weights = cost.field_weights
    prompt_chars = (cost.prompt_overhead_chars + weights.get("input", 0) * input_chars
                    + weights.get("output", 0) * output_chars + weights.get("context", 0) * context_chars)
    completion = cost.completion_overhead_tokens + cost.completion_output_share * output_chars / CHARS_PER_TOKEN
    return prompt_chars / CHARS_PER_TOKEN, completion


def estimate_pair_cost(prices: MetricPrices, metric: str, *, input: Any, output: Any, context: Any,
                       max_field_chars: int | None = None) -> float:
    """USD one pending (trace, metric) pair is expected to cost."""
    prompt, completion = estimate_tokens(
        metric, input_chars=_chars(input), output_chars=_chars(output), context_chars=_chars(context),
        max_field_chars=max_field_chars,
    )
    return prices.of(metric).cost(prompt, completion)
