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
``dead_deliveries``
    alert deliveries that died in the window (a permanent 4xx, or
    ``JUDGEFLOW_ALERT_DEAD_AFTER`` failed evaluations) over the deliveries
    ended in it (delivered or dead), all channels: the alerting path itself
    failing, as ``failure_rate`` is the judge failing. Overall only, no minimum
    sample (a window where nothing ended is 0); evaluated after the
    evaluation's deliveries, so a delivery that dies is counted at once.
``unwritten_results``
    a Phoenix source's scored results the write-back tried and failed to write
    that are still unwritten ``JUDGEFLOW_PHOENIX_UNWRITTEN_MAX_AGE`` after they
    were scored (however old: not bounded by the window), over all its unwritten
    results: a write-back problem pages until it is fixed. Its setting is the age
    (empty: off); on with a Phoenix source whose write-back is on; the maximum
    share is 0, overall only, no minimum sample.
``regression``
    the not-passed rate of ``metric`` in the window against the same rate in
    the baseline period just before it (``JUDGEFLOW_REGRESSION_BASELINE``).
    Its setting is the minimum absolute increase that pages; it fires only when
    the increase is at least that, Fisher's exact test (one-sided) finds it
    significant at ``JUDGEFLOW_REGRESSION_ALPHA``, and both periods hold
    ``JUDGEFLOW_ALERT_MIN_SAMPLES`` results.

Every rule is evaluated over all results and, with ``JUDGEFLOW_ALERT_SEGMENT_BY``,
per segment: each value of each metadata key (the top
``JUDGEFLOW_ALERT_SEGMENT_TOP`` by volume, the rest grouped as ``other``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from judgeflow.config.settings import Settings

RuleKind = Literal["not_passed_rate", "failure_rate", "regression", "dead_deliveries", "unwritten_results"]
# counted apart from eval_results' rates: overall only, no minimum sample
_OVERALL_ONLY = ("dead_deliveries", "unwritten_results")


@dataclass(frozen=True)
class RuleSpec:
    name: str
    kind: RuleKind
    metric: str | None
    setting: str  # the Settings field holding the maximum / minimum increase (None there: disabled)
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
    RuleSpec(
        "toxicity_regression", "regression", "toxicity", "toxicity_regression_min_increase",
        "rise of the toxicity not-passed rate over its baseline period, significant by Fisher's exact test",
    ),
    RuleSpec(
        "hallucination_regression", "regression", "hallucination", "hallucination_regression_min_increase",
        "rise of the hallucination not-passed rate over its baseline period, significant by Fisher's exact test",
    ),
    RuleSpec(
        "dead_delivery_rate", "dead_deliveries", None, "dead_delivery_rate_max",
        "share of the source's alert deliveries ended in the window that are dead (given up on), all channels",
    ),
    RuleSpec(
        "phoenix_unwritten", "unwritten_results", None, "phoenix_unwritten_max_age",
        "share of the Phoenix write-back's unwritten results still waiting past JUDGEFLOW_PHOENIX_UNWRITTEN_MAX_AGE "
        "after a failed write",
    ),
)


@dataclass(frozen=True)
class Rule:
    name: str
    kind: RuleKind
    metric: str | None
    setting: str
    description: str
    maximum: float | None  # maximum-rate rules: the line (None for regressions)
    window: str
    window_s: float
    min_samples: int
    renotify_s: float | None
    min_increase: float | None = None  # regression rules: the smallest absolute rise that pages
    baseline: str = "7d"
    baseline_s: float = 7 * 86400.0
    alpha: float = 0.01
    resolve_alpha: float = 0.05
    hysteresis: float = 0.0
    segment_by: tuple[str, ...] = ()
    segment_top: int = 10
    # the results counted: those read from this source (judgeflow/sources/identity.py)
    source: str | None = None
    max_age_s: float | None = None  # unwritten_results: how long a failed write-back may stay unwritten

    @property
    def is_regression(self) -> bool:
        return self.kind == "regression"

    @property
    def limit(self) -> float | None:
        """What the rule's setting holds: the maximum, or the minimum increase."""
        return self.min_increase if self.is_regression else self.maximum

    @property
    def enabled(self) -> bool:
        return self.limit is not None

    @property
    def env_var(self) -> str:
        return f"JUDGEFLOW_{self.setting.upper()}"

    @property
    def resource_id(self) -> str:
        """The Prefect resource id of this rule's events."""
        return f"judgeflow.rule.{self.name}"


def _maximum(spec: RuleSpec, settings: Settings) -> float | None:
    if spec.kind == "regression":
        return None
    if spec.kind == "unwritten_results":  # its setting is the age; past it, no result may wait
        on = settings.source == "phoenix" and settings.phoenix_write_back
        return 0.0 if on and getattr(settings, spec.setting) else None
    return getattr(settings, spec.setting)


def all_rules(settings: Settings) -> list[Rule]:
    """Every known rule, enabled or not, in a fixed order."""
    from judgeflow.sources.identity import result_source

    return [
        Rule(
            name=spec.name,
            kind=spec.kind,
            metric=spec.metric,
            setting=spec.setting,
            description=spec.description,
            maximum=_maximum(spec, settings),
            min_increase=getattr(settings, spec.setting) if spec.kind == "regression" else None,
            window=settings.alert_window,
            window_s=settings.alert_window_s,
            # dead deliveries are few and each one matters: no minimum sample
            min_samples=0 if spec.kind in _OVERALL_ONLY else settings.alert_min_samples,
            renotify_s=settings.alert_renotify_s,
            baseline=settings.regression_baseline,
            baseline_s=settings.regression_baseline_s,
            alpha=settings.regression_alpha,
            resolve_alpha=settings.regression_resolve_alpha,
            hysteresis=settings.alert_hysteresis,
            segment_by=() if spec.kind in _OVERALL_ONLY else settings.alert_segment_keys,
            segment_top=settings.alert_segment_top,
            source=result_source(settings),
            max_age_s=settings.phoenix_unwritten_max_age_s if spec.kind == "unwritten_results" else None,
        )
        for spec in RULE_SPECS
    ]


def enabled_rules(settings: Settings) -> list[Rule]:
    return [rule for rule in all_rules(settings) if rule.enabled]
