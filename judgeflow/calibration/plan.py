"""What a calibration will cost, shown before it asks (as `judgeflow shadow`
does). The budget it keeps to (`judgeflow calibrate --budget-usd`) is its
policy's (tasks/calibration.py, judgeflow/run/policy.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from judgeflow.calibration.labelled import LabelledItem
from judgeflow.config.settings import Settings


@dataclass(frozen=True)
class CalibrationPlan:
    judge_model: str
    pairs: int
    cost_usd: float | None  # None: nobody knows the judge's prices
    basis: str

    def describe(self) -> str:
        cost = "unknown" if self.cost_usd is None else f"${self.cost_usd:,.4f}"
        return (f"{self.pairs} (item, metric) pair(s) to judge with {self.judge_model}; "
                f"estimated cost {cost} ({self.basis})")


def pair_estimator(settings: Settings) -> Callable[[LabelledItem, str], float] | None:
    """USD one labelled (item, metric) is expected to cost; None without prices."""
    from judgeflow.judge.pricing import prices_for
    from judgeflow.metrics.cost import estimate_pair_cost

    prices = prices_for(settings)
    if prices is None:
        return None

    def estimate(item: LabelledItem, metric: str) -> float:
        return estimate_pair_cost(prices, metric, input=item.input, output=item.output, context=item.context,
                                  max_field_chars=settings.max_field_chars)

    return estimate


def plan_calibration(settings: Settings, items: list[LabelledItem]) -> CalibrationPlan:
    from judgeflow.judge.pricing import prices_for

    pairs = sum(len(item.labels) for item in items)
    prices = prices_for(settings)
    if prices is None:
        return CalibrationPlan(settings.judge_model, pairs, None,
                               f"litellm has no price for {settings.judge_model}; set "
                               "JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK and JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK")
    estimate = pair_estimator(settings)
    cost = sum(estimate(item, metric) for item in items for metric in item.labels)
    return CalibrationPlan(settings.judge_model, pairs, cost,
                           f"tokens estimated from the items' text, at {prices.source}")
