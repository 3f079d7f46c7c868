"""Alert rules, built from settings.

A rule is a rate over the rolling window (by trace ``created_at``) and a
maximum. Every registered metric has a ``<name>_rate`` rule (its settings'
``rate_max``, ``JUDGEFLOW_<NAME>_RATE_MAX``) and a ``<name>_regression`` rule
(``regression_min_increase``); its spec's settings model holds their defaults.
So has every trace metric's session rate ``<name>_session``
(:mod:`judgeflow.metrics.session_rate`): ``<name>_session_rate`` (its
default: a built-in trace metric's own default maximum, a plugin's or file's off) and
``<name>_session_regression`` (off), counted over sessions, each by its
last turn's time.
The other rules are :data:`FAILURE_RULE` and :data:`DEAD_DELIVERY_RULE`.

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
``JUDGEFLOW_ALERT_SEGMENT_TOP`` by volume, the rest grouped as ``other``). A
metric with keys of its own (a metrics file's ``segment_by``) has its two
rules segmented by those instead (``[]``: overall only), as a monitor's own
"group by" replaces any default; the judge failure rate keeps the global keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from judgeflow.config.settings import Settings
from judgeflow.metrics.registry import reported

RuleKind = Literal["not_passed_rate", "failure_rate", "regression", "dead_deliveries", "unwritten_results"]
# counted apart from eval_results' rates: overall only, no minimum sample
_OVERALL_ONLY = ("dead_deliveries", "unwritten_results")


@dataclass(frozen=True)
class RuleSpec:
    name: str
    kind: RuleKind
    metric: str | None
    setting: str  # the setting holding the maximum / minimum increase (None there: disabled)
    description: str


# The rules of every metric (judgeflow/metrics/registry.py): kind -> (rule name suffix, the metric's
# settings field holding its limit, description with {name}).
METRIC_RULES: dict[RuleKind, tuple[str, str, str]] = {
    "not_passed_rate": ("rate", "rate_max", "share of scored {name} results that did not pass"),
    "regression": (
        "regression", "regression_min_increase",
        "rise of the {name} not-passed rate over its baseline period, significant by Fisher's exact test",
    ),
}
FAILURE_RULE = RuleSpec(
    "judge_failure_rate", "failure_rate", None, "failure_rate_max",
    "share of scorings that failed: failed / (scored + failed), all metrics",
)
DEAD_DELIVERY_RULE = RuleSpec(
    "dead_delivery_rate", "dead_deliveries", None, "dead_delivery_rate_max",
    "share of the source's alert deliveries ended in the window that are dead (given up on), all channels",
)
PHOENIX_UNWRITTEN_RULE = RuleSpec(
    "phoenix_unwritten", "unwritten_results", None, "phoenix_unwritten_max_age",
    "share of the Phoenix write-back's unwritten results still waiting past JUDGEFLOW_PHOENIX_UNWRITTEN_MAX_AGE "
    "after a failed write",
)


def _metric_rules(kind: RuleKind) -> list[RuleSpec]:
    suffix, field, description = METRIC_RULES[kind]
    return [RuleSpec(f"{name}_{suffix}", kind, name, spec.setting_name(field), description.format(name=name))
            for name, spec in reported().items()]


def rule_specs() -> tuple[RuleSpec, ...]:
    """Every rule: each metric's maximum rate, the judge's failure rate, each
    metric's regression, dead deliveries, the Phoenix write-back's unwritten
    results (the order they are listed in)."""
    return (*_metric_rules("not_passed_rate"), FAILURE_RULE, *_metric_rules("regression"), DEAD_DELIVERY_RULE,
            PHOENIX_UNWRITTEN_RULE)


def _limit(settings: Settings, spec: RuleSpec) -> float | None:
    """What the rule's setting holds (None: disabled)."""
    if spec.metric is None:
        return getattr(settings, spec.setting)
    return getattr(settings.metric(spec.metric), METRIC_RULES[spec.kind][1])


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
    # a metric's maximum rule: the rate it decides on, "judged" (what the judge said) or "corrected"
    # (for the judge's error on people's labels, judgeflow/alerts/corrected.py; the judged rate while
    # the labels are not enough); its metric's `rate_on` setting, JUDGEFLOW_<NAME>_RATE_ON
    rate_on: str = "judged"

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
    return _limit(settings, spec)


def _segment_by(spec: RuleSpec, settings: Settings) -> tuple[str, ...]:
    if spec.kind in _OVERALL_ONLY:
        return ()
    return settings.alert_segment_keys if spec.metric is None else settings.metric_segment_keys(spec.metric)


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
            min_increase=_limit(settings, spec) if spec.kind == "regression" else None,
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
            segment_by=_segment_by(spec, settings),
            segment_top=settings.alert_segment_top,
            source=result_source(settings),
            max_age_s=settings.phoenix_unwritten_max_age_s if spec.kind == "unwritten_results" else None,
            rate_on=settings.metric(spec.metric).rate_on if spec.kind == "not_passed_rate" else "judged",
        )
        for spec in rule_specs()
    ]


def enabled_rules(settings: Settings) -> list[Rule]:
    return [rule for rule in all_rules(settings) if rule.enabled]
