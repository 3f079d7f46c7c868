"""What judging costs: one cost model for run budgets, backfill estimates and
(when prices are configured) the ``cost_usd`` of each result.

Prices come from ``JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK`` /
``JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK`` when set, else from litellm's bundled
price map (imported only when a price is asked for, never at CLI start-up);
the offline judge is free. Tokens of a pair not yet scored are estimated from
the length of its text, by each metric's declared cost
(:class:`judgeflow.metrics.registry.CostEstimate`, measured by rendering its
prompts for short and long traces), at ~4 characters per token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from judgeflow.errors import ConfigError
from judgeflow.judge.factory import is_offline_model
from judgeflow.metrics.registry import spec_of

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings

CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class Prices:
    input_per_mtok: float
    output_per_mtok: float
    source: str

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1_000_000


def prices_for(settings: "Settings") -> Prices | None:
    """The judge's prices, or None when nobody knows them."""
    if settings.judge_input_cost_per_mtok is not None and settings.judge_output_cost_per_mtok is not None:
        return Prices(settings.judge_input_cost_per_mtok, settings.judge_output_cost_per_mtok,
                      "JUDGEFLOW_JUDGE_INPUT/OUTPUT_COST_PER_MTOK")
    if is_offline_model(settings.judge_model):
        return Prices(0.0, 0.0, "the offline judge is free")
    from judgeflow.judge.litellm_judge import model_prices  # imports litellm

    per_token = model_prices(settings.judge_model)
    if per_token is None:
        return None
    return Prices(per_token[0] * 1_000_000, per_token[1] * 1_000_000, f"litellm's price map for {settings.judge_model}")


def require_prices(settings: "Settings", *, why: str) -> Prices:
    prices = prices_for(settings)
    if prices is None:
        raise ConfigError(
            f"{why}, but litellm has no price for judge model {settings.judge_model!r}: set "
            "JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK and JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK (USD per million tokens)"
        )
    return prices


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


def estimate_pair_cost(prices: Prices, metric: str, *, input: Any, output: Any, context: Any,
                       max_field_chars: int | None = None) -> float:
    """USD one pending (trace, metric) pair is expected to cost."""
    prompt, completion = estimate_tokens(
        metric, input_chars=_chars(input), output_chars=_chars(output), context_chars=_chars(context),
        max_field_chars=max_field_chars,
    )
    return prices.cost(prompt, completion)
