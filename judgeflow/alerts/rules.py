"""Alert rules, built from settings.

A rule is a rate over the rolling window (by trace ``created_at``) and a
maximum. Each rule is one row of :data:`RULE_SPECS`: a new rule of an existing
kind needs a row here and a ``*_max`` setting, no other code.

Kinds:

``not_passed_rate``
    results of ``metric`` with status 'scored' whose ``passed`` is not true,
    over all results of ``metric`` with status 'scored'. Failed scorings are
    neither counted as bad nor as good; they are reported beside the rate.
``failure_rate``
    results with status 'failed' over results with status 'scored' or
    'failed', all metrics together ('skipped' is neither).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from judgeflow.settings import Settings

RuleKind = Literal["not_passed_rate", "failure_rate"]


@dataclass(frozen=True)
class RuleSpec:
    name: str
    kind: RuleKind
    metric: str | None
    setting: str  # the Settings field holding the maximum (None there: disabled)
    description: str


RULE_SPECS: tuple[RuleSpec, ...] = (
    RuleSpec(
        "toxicity_rate", "not_passed_rate", "toxicity", "toxicity_rate_max",
        "share of scored toxicity results that did not pass",
    ),
    RuleSpec(
        "hallucination_rate", "not_passed_rate", "hallucination", "hallucination_rate_max",
        "share of scored hallucination results that did not pass",
    ),
    RuleSpec(
        "judge_failure_rate", "failure_rate", None, "failure_rate_max",
        "share of scorings that failed: failed / (scored + failed), all metrics",
    ),
)


@dataclass(frozen=True)
class Rule:
    name: str
    kind: RuleKind
    metric: str | None
    setting: str
    description: str
    maximum: float | None
    window: str
    window_s: float
    min_samples: int
    renotify_s: float | None

    @property
    def enabled(self) -> bool:
        return self.maximum is not None

    @property
    def env_var(self) -> str:
        return f"JUDGEFLOW_{self.setting.upper()}"

    @property
    def resource_id(self) -> str:
        """The Prefect resource id of this rule's events."""
        return f"judgeflow.rule.{self.name}"


def all_rules(settings: Settings) -> list[Rule]:
    """Every known rule, enabled or not, in a fixed order."""
    return [
        Rule(
            name=spec.name,
            kind=spec.kind,
            metric=spec.metric,
            setting=spec.setting,
            description=spec.description,
            maximum=getattr(settings, spec.setting),
            window=settings.alert_window,
            window_s=settings.alert_window_s,
            min_samples=settings.alert_min_samples,
            renotify_s=settings.alert_renotify_s,
        )
        for spec in RULE_SPECS
    ]


def enabled_rules(settings: Settings) -> list[Rule]:
    return [rule for rule in all_rules(settings) if rule.enabled]
