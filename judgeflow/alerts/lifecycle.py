"""When a (rule, segment) fires, reminds and resolves: the pure decision.

Hysteresis keeps a rate that hovers at the line from paging on every run:

- a maximum rule fires above ``maximum`` and, once firing, resolves only at or
  below ``maximum * (1 - JUDGEFLOW_ALERT_HYSTERESIS)``. Over a sampled window
  (some result stands for more traces than itself, judgeflow/alerts/estimates.py)
  the rate is an estimate, and the rule reads its 95% interval: it fires only
  when the lower bound is above the maximum and, once firing, resolves only
  when the upper bound is at or below the resolve line. A window judged in
  full has no such uncertainty, and the rule reads the rate itself, as it
  always did. A rule set to the corrected rate (``JUDGEFLOW_<NAME>_RATE_ON=corrected``,
  judgeflow/alerts/corrected.py) reads the corrected rate's interval the same way (fire on its
  lower bound, stay firing on its upper), and the judged rate while its labels are not enough;
- a regression rule fires when the increase over the baseline is at least
  ``min_increase`` *and* Fisher's one-sided p-value, Holm-adjusted over the
  rule's family, is at most ``JUDGEFLOW_REGRESSION_ALPHA``; once firing it
  stays firing while the increase is at least ``min_increase * (1 -
  hysteresis)`` and the adjusted p-value at most the looser
  ``JUDGEFLOW_REGRESSION_RESOLVE_ALPHA``, and resolves otherwise.

The family of a regression rule is every segment it tests in one evaluation:
overall and each segment with enough data (:func:`correct_for_family`). Holm's
correction over it makes ``JUDGEFLOW_REGRESSION_ALPHA`` the chance that the
evaluation raises *any* false regression alert for the rule, however many
segments it tests; a rule with no segments is one test, unchanged.

Too few samples (in the window, or for a regression in either period) neither
fires nor resolves. Samples are the effective sample size of the period
(Kish's, the judged count when every weight is 1): ten judged results that
stand for hundreds of traces are not fifty samples: the state stays what it was. Only results of the judge
epoch in force are samples (:mod:`judgeflow.db.epochs`); when the periods hold
results of an earlier judge that were left out, the outcome is
``insufficient_data`` ("judge changed at ..."), else ``not_enough_data``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Literal

from judgeflow.alerts.evaluation import Figures
from judgeflow.alerts.rules import Rule
from judgeflow.alerts.stats import holm_adjusted

State = Literal["ok", "firing"]
Outcome = Literal["ok", "firing", "not_enough_data", "insufficient_data"]
Transition = Literal["fired", "reminder", "resolved"]


def effective_samples(sample_size: int, estimate) -> float:
    """What a period's minimum-samples check counts: its effective sample size
    when it was sampled, else its judged results."""
    return estimate.n_eff if estimate is not None and estimate.sampled else sample_size


def evidence(figures: Figures) -> dict[str, float | None]:
    """The rate's evidence as the alert tables record it: its 95% interval, the
    traffic its judged results stand for, and the effective sample size."""
    e = figures.estimate
    if e is None or e.rate is None:
        return {"ci_low": None, "ci_high": None, "traffic": None, "effective_n": None}
    return {"ci_low": e.ci_low, "ci_high": e.ci_high, "traffic": e.traces,
            "effective_n": effective_samples(figures.sample_size, e)}


def _at_least(samples: float, minimum: int) -> bool:
    # Kish's size of n equal weights is n up to rounding (49.99999999999999 for 50):
    # that residue is not a missing sample
    return samples * (1 + 1e-9) >= minimum


def enough_data(rule: Rule, figures: Figures) -> bool:
    if figures.value is None or not _at_least(effective_samples(figures.sample_size, figures.estimate),
                                              rule.min_samples):
        return False
    if rule.is_regression:
        return figures.baseline_value is not None and _at_least(effective_samples(
            figures.baseline_sample_size, figures.baseline_estimate), rule.min_samples)
    return True


def judge_changed(rule: Rule, figures: Figures) -> bool:
    """Whether results of an earlier judge epoch were left out of the periods the rule compares."""
    return figures.other_epoch > 0 or (rule.is_regression and figures.other_epoch_baseline > 0)


def correct_for_family(rule: Rule, figures: list[Figures]) -> list[Figures]:
    """``figures`` (one evaluation of ``rule``: overall and its segments) with
    each tested segment's p-value Holm-adjusted over the family of the segments
    tested: those with enough data and a p-value. Other rules' figures are
    returned unchanged."""
    if not rule.is_regression:
        return figures
    tested = [enough_data(rule, f) and f.p_value is not None for f in figures]
    adjusted = holm_adjusted([f.p_value if t else None for f, t in zip(figures, tested)])
    size = sum(tested)
    return [replace(f, p_adjusted=a, family_size=size) if t else f for f, a, t in zip(figures, adjusted, tested)]


def rate_used(rule: Rule, figures: Figures) -> tuple[str, str | None]:
    """(the rate a maximum rule decides on, "judged" or "corrected"; why it fell back, if it did). A
    rule set to the corrected rate (``JUDGEFLOW_<NAME>_RATE_ON=corrected``) decides on the judged rate
    while its labels are not enough, and says so."""
    if rule.rate_on != "corrected" or rule.is_regression:
        return "judged", None
    c = figures.corrected
    if c is None or c.rate is None:
        why = c.reason if c is not None else "no labels read"
        return "judged", f"decided on the judged rate: no corrected rate ({why})"
    return "corrected", None


def breaching(rule: Rule, figures: Figures, *, firing: bool) -> bool:
    """Whether the figures hold the rule's condition; ``firing`` applies the
    looser, staying-firing condition (hysteresis)."""
    assert rule.limit is not None, "disabled rules are never evaluated"
    keep = 1.0 - rule.hysteresis if firing else 1.0
    if rule.is_regression:
        increase, p = figures.increase, figures.decision_p
        if increase is None or p is None:
            return False
        alpha = max(rule.resolve_alpha, rule.alpha) if firing else rule.alpha
        # a tiny epsilon: 0.03 - 0.01 is 0.019999999999999997 in floating point
        return increase + 1e-12 >= rule.limit * keep and p <= alpha
    if rate_used(rule, figures)[0] == "corrected":
        # the corrected rate is always an estimate (people labelled a sample): it pages on its
        # interval as a sampled window's rate does
        c = figures.corrected
        return (c.ci_high if firing else c.ci_low) > rule.limit * keep
    e = figures.estimate
    if e is not None and e.sampled and e.ci_low is not None:
        # an estimate pages on evidence: fire on its lower bound, stay firing on its upper
        return (e.ci_high if firing else e.ci_low) > rule.limit * keep
    return figures.value > rule.limit * keep


def decide(
    rule: Rule, figures: Figures, *, state: State, last_notified_at: datetime | None, now: datetime
) -> tuple[Outcome, State, Transition | None]:
    """(what the figures say, the new state, the notification due)."""
    if not enough_data(rule, figures):
        return ("insufficient_data" if judge_changed(rule, figures) else "not_enough_data"), state, None
    if breaching(rule, figures, firing=state == "firing"):
        if state != "firing":
            return "firing", "firing", "fired"
        if rule.renotify_s is not None and (
            last_notified_at is None or (now - last_notified_at).total_seconds() >= rule.renotify_s
        ):
            return "firing", "firing", "reminder"
        return "firing", "firing", None
    if state == "firing":
        return "ok", "ok", "resolved"
    return "ok", "ok", None
