"""A rate corrected for the judge's error: two-phase sampling with the judge's verdict as strata.

Phase 1 is what the judge said of a period's results: each judged result ``i`` has its verdict
(fail / pass) and its weight ``w_i`` (1 on a night judged in full, 1/p on a sampled night;
judgeflow/alerts/estimates.py). ``Ŵ_h`` is the weighted share of the period's results the judge put
in verdict ``h``: ``Ŵ_fail`` is the judged rate itself, ``Ŵ_pass = 1 - Ŵ_fail``.

Phase 2 is a probability sample of the judged results, stratified by verdict, that people labelled
(`judgeflow labels sample` / `import`; judgeflow/db/labels.py). ``p̂_h`` is the share of the labelled
results of stratum ``h`` that people say fail, each weighted by its result's own sample weight (a
draw's inclusion probability ``n_h / N_h`` is the same for every result of a stratum, so it cancels
within a stratum; draws of one judge epoch are pooled, as they estimate the same ``p_h``).

- The corrected rate is ``θ̂ = Σ_h Ŵ_h p̂_h``: the double-sampling-for-stratification estimator
  (Cochran, *Sampling Techniques*, 12.2), which is also stratified prediction-powered inference with
  a binary predictor and the verdict as strata (its "rectifier" ``p̂_fail - 1`` on judged fails and
  ``p̂_pass`` on judged passes).
- Its interval combines per-stratum intervals of ``p_h`` by the method of variance estimates recovery
  (MOVER; Newcombe 2011, Zou and Donner 2008) for a weighted sum of proportions:
  ``θ̂ ∓ sqrt(Σ_h Ŵ_h² (p̂_h - l_h)² + z² V1)`` (``u_h`` above; ``z`` = 1.96). Each stratum's ``[l_h, u_h]`` is
  Wilson's on its labels' effective size, or the exact Clopper-Pearson interval where fewer than 5
  failing (or passing) labels are expected (the rule estimates.py uses), so a stratum where people
  found no failure still says how many it may hold: a Wald interval would say none, and small
  ``n_h`` with ``p̂_h`` near 0 or 1 is the common case (a good judge's pass stratum).
- ``V1 = (p̂_fail - p̂_pass)² Var(Ŵ_fail)``: the phase-1 uncertainty of a sampled night, the judged
  rate's own variance (estimates.py :func:`rate_variance`: the stratified variance over the sample
  classes); 0 on a period judged in full, whose ``Ŵ_h`` are counted, not estimated.
- The finite-population correction ``1 - n_h / N_h`` applies to a stratum's labels only when they
  were drawn from the very results estimated and those were judged in full (then phase 1 is a census
  and phase 2 samples it). A draw from another period, or from a sampled night, takes none: the
  within-verdict variation the correction would remove is then phase-1 sampling of its own
  (Cochran 12.3), so leaving it out keeps that term.
- Bounds are clipped to [0, 1] and hold the rate.

The assumption that matters: **the judge's error per verdict, ``p_h``, is the same in the period
estimated as in the labelled draws of the same judge epoch** (labels count only for their epoch).
A judge that changed its behaviour without a new epoch, or a period whose traffic fails in ways the
labelled period did not show, breaks it, and no interval can say so.

Enough labels: at least :data:`MIN_LABELS` labels in each verdict stratum the period holds (a
stratum the period does not hold needs none). Otherwise there is no corrected rate, and ``reason``
says which stratum is short.

When correction does not help: a judge no better than chance (false-positive rate + false-negative
rate = 1) puts the same share of failures in both verdicts, so ``p_fail = p_pass = θ`` and the
``Ŵ_h`` carry no information: the corrected interval is then the labels' own, split in two strata,
about as wide as labels alone or wider (bench/corrected_rates.py: 0.96 to 1.77 times as wide).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Protocol

from judgeflow.alerts.estimates import (
    FEW_EVENTS, Z95, WeightedCounts, clopper_pearson, estimate, rate_variance, wilson,
)

FAIL, PASS = "fail", "pass"  # the strata: the judge's verdict (as judgeflow/db/labels.py names them)
# labels needed in each verdict stratum the period holds before a corrected rate is given
MIN_LABELS = 10


@dataclass(frozen=True)
class VerdictLabels:
    """The labels of one verdict stratum: ``n`` labelled results, the sums of their result weights
    (all, those people say fail, squares) and, when they were drawn from the very results estimated
    and those were judged in full, ``population``: the stratum's size ``N_h`` the draw was made from
    (the finite-population correction applies; None: it does not)."""

    n: int = 0
    sum_w: float = 0.0
    sum_w_fail: float = 0.0
    sum_w2: float = 0.0
    population: int | None = None

    @classmethod
    def of(cls, labels: Iterable[tuple[bool, float]], population: int | None = None) -> "VerdictLabels":
        """From ``(people say it fails, the result's weight)`` per labelled result."""
        labels = list(labels)
        return cls(n=len(labels), sum_w=math.fsum(w for _, w in labels),
                   sum_w_fail=math.fsum(w for fail, w in labels if fail),
                   sum_w2=math.fsum(w * w for _, w in labels), population=population)

    @classmethod
    def counted(cls, n: int, fail: int, population: int | None = None) -> "VerdictLabels":
        """``n`` labels of weight 1, ``fail`` of them saying the result fails."""
        return cls(n=n, sum_w=float(n), sum_w_fail=float(fail), sum_w2=float(n), population=population)

    @property
    def rate(self) -> float | None:
        """``p̂_h``: the weighted share people say fails."""
        return self.sum_w_fail / self.sum_w if self.sum_w > 0 else None

    @property
    def size(self) -> float:
        """The effective size the stratum's interval is computed on: Kish's, divided by ``1 - n/N``
        when the finite-population correction applies."""
        if self.sum_w2 <= 0:
            return 0.0
        kish = self.sum_w**2 / self.sum_w2
        if self.population and self.n < self.population:
            return kish / (1.0 - self.n / self.population)
        return math.inf if self.population and self.n >= self.population else kish


@dataclass(frozen=True)
class Corrected:
    """The corrected rate of a period with its 95% interval, or why there is none (``reason``)."""

    rate: float | None
    ci_low: float | None
    ci_high: float | None
    labels: int  # the labels used (those of the strata the period holds)
    reason: str | None = None
    judged_fail_share: float | None = None  # Ŵ_fail: the judged rate
    fail_given_fail: float | None = None  # p̂_fail: the share of judged fails people say fail
    fail_given_pass: float | None = None  # p̂_pass: the share of judged passes people say fail


class LabelledResult(Protocol):
    """A labelled result of a draw (judgeflow/db/labels.py ``LabelledItem``)."""

    stratum: str
    label: bool
    result_weight: float
    segment: dict[str, Any]


def in_segment(item: LabelledResult, key: str | None, value: str | None, others: tuple[str, ...] | None) -> bool:
    """Whether ``item`` is in the segment ``key=value`` (``key`` None: overall; ``others`` not None:
    the ``other`` group of ``key``, every value but those): a draw over every segment serves a
    segment as a domain of its sample."""
    if key is None:
        return True
    held = item.segment.get(key)
    if held is None:
        return False
    return str(held) not in others if others is not None else str(held) == value


def labels_by_verdict(items: Iterable[LabelledResult], key: str | None = None, value: str | None = None,
                      others: tuple[str, ...] | None = None) -> tuple[VerdictLabels, VerdictLabels]:
    """(fail, pass): the labels of the results the judge called fail and pass, of one segment
    (:func:`in_segment`), pooled over the draws of the judge epoch in force."""
    kept = [i for i in items if in_segment(i, key, value, others)]
    return tuple(VerdictLabels.of((i.label, i.result_weight) for i in kept if i.stratum == h)  # type: ignore[return-value]
                 for h in (FAIL, PASS))


def stratum_bounds(rate: float, size: float) -> tuple[float, float]:
    """The 95% interval of one stratum's ``p_h``: Wilson's on ``size``, or Clopper-Pearson's where
    fewer than 5 events (or non-events) are expected (estimates.py's rule); exact on a census."""
    if math.isinf(size):
        return rate, rate
    if size * rate < FEW_EVENTS or size * (1 - rate) < FEW_EVENTS:
        return clopper_pearson(rate * size, size)
    return wilson(rate, size)


def _shortage(judged: WeightedCounts, strata: dict[str, VerdictLabels], min_labels: int) -> str | None:
    """Why the labels are not enough for this period (None: they are)."""
    held = {FAIL: judged.bad > 0, PASS: judged.n - judged.bad > 0}
    short = [f"{h} {strata[h].n}" for h in (FAIL, PASS) if held[h] and strata[h].n < min_labels]
    if not short:
        return None
    return (f"not enough labels: {', '.join(short)} (at least {min_labels} per verdict the judge gave, "
            "from the judge epoch in force)")


def corrected_rate(judged: WeightedCounts, fail: VerdictLabels, passed: VerdictLabels, *,
                   min_labels: int = MIN_LABELS) -> Corrected:
    """The corrected rate of a period whose judged results are ``judged`` (``bad``: the judge said
    fail), from the labels of each verdict stratum (see the module doc)."""
    used = (fail.n if judged.bad > 0 else 0) + (passed.n if judged.n - judged.bad > 0 else 0)
    if judged.n == 0 or judged.sum_w <= 0:
        return Corrected(None, None, None, 0, "nothing judged in the period")
    reason = _shortage(judged, {FAIL: fail, PASS: passed}, min_labels)
    w_fail = estimate(judged).rate
    if reason is not None:
        return Corrected(None, None, None, used, reason, judged_fail_share=w_fail)
    weights = {FAIL: w_fail, PASS: 1.0 - w_fail}
    rates, low_sq, high_sq = {}, 0.0, 0.0
    for h, labels in ((FAIL, fail), (PASS, passed)):
        if weights[h] <= 0 or labels.rate is None:
            rates[h] = labels.rate
            continue
        p = rates[h] = labels.rate
        lo, hi = stratum_bounds(p, labels.size)
        low_sq += (weights[h] * (p - lo)) ** 2
        high_sq += (weights[h] * (hi - p)) ** 2
    theta = math.fsum(weights[h] * rates[h] for h in (FAIL, PASS) if weights[h] > 0)
    theta = min(1.0, max(0.0, theta))
    spread = (rates[FAIL] or 0.0) - (rates[PASS] or 0.0) if None not in rates.values() else 0.0
    # a sampled night's Ŵ is an estimate too: its 95% half-width, squared, as the strata's terms are
    v1 = (Z95 * spread) ** 2 * rate_variance(judged)
    low = max(0.0, min(theta, theta - math.sqrt(low_sq + v1)))
    high = min(1.0, max(theta, theta + math.sqrt(high_sq + v1)))
    return Corrected(theta, low, high, used, None, judged_fail_share=w_fail,
                     fail_given_fail=rates[FAIL], fail_given_pass=rates[PASS])
