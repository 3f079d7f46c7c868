"""The corrected rate (judgeflow/alerts/corrected.py): the estimator, its interval's parts, and when
it gives no rate. Pure: no database."""

from __future__ import annotations

import pytest

from judgeflow.alerts.corrected import MIN_LABELS, VerdictLabels, corrected_rate, stratum_bounds
from judgeflow.alerts.estimates import StratumCounts, WeightedCounts, rate_variance, wilson


def test_the_issue_case_judged_a_third_corrected_a_tenth():
    # 1,000 traces, 10% toxic, a judge calling a quarter of harmless replies toxic: 325 judged toxic;
    # people label 50 of each verdict: 15 of the judged toxic are toxic, none of the judged harmless
    judged = WeightedCounts.unweighted(1000, 325)
    r = corrected_rate(judged, VerdictLabels.counted(50, 15), VerdictLabels.counted(50, 0))
    assert r.rate == pytest.approx(0.325 * 0.3)
    assert r.ci_low < 0.10 < r.ci_high and r.ci_low > 0.05 and r.ci_high < 0.17
    assert r.labels == 100 and r.reason is None
    assert (r.judged_fail_share, r.fail_given_fail, r.fail_given_pass) == (0.325, 0.3, 0.0)


def test_a_stratum_whose_labels_all_pass_still_widens_the_interval():
    # Wald would give the pass stratum no width; its exact interval says up to ~7% of 50 may fail
    lo, hi = stratum_bounds(0.0, 50)
    assert lo == 0.0 and 0.06 < hi < 0.08
    r = corrected_rate(WeightedCounts.unweighted(1000, 100), VerdictLabels.counted(50, 50),
                       VerdictLabels.counted(50, 0))
    assert r.rate == pytest.approx(0.1) and r.ci_high > 0.1 + 0.9 * 0.06


def test_labels_drawn_from_the_window_judged_in_full_take_the_finite_population_correction():
    judged = WeightedCounts.unweighted(200, 100)
    free = corrected_rate(judged, VerdictLabels.counted(50, 20), VerdictLabels.counted(50, 10))
    own = corrected_rate(judged, VerdictLabels.counted(50, 20, population=100),
                         VerdictLabels.counted(50, 10, population=100))
    census = corrected_rate(judged, VerdictLabels.counted(100, 40, population=100),
                            VerdictLabels.counted(100, 20, population=100))
    assert own.rate == free.rate
    assert own.ci_high - own.ci_low < free.ci_high - free.ci_low
    # every result labelled: the rate is counted, not estimated
    assert census.ci_low == census.rate == census.ci_high == pytest.approx(0.3)


def test_a_sampled_night_adds_the_judged_shares_own_variance():
    full = WeightedCounts.unweighted(2000, 400)
    sampled = WeightedCounts.from_strata([StratumCounts(1000, 200, 0.1), StratumCounts(1000, 200, 0.5)])
    labels = VerdictLabels.counted(100, 80), VerdictLabels.counted(100, 5)
    a, b = corrected_rate(full, *labels), corrected_rate(sampled, *labels)
    assert a.rate == pytest.approx(b.rate)
    assert rate_variance(full) == 0.0 and rate_variance(sampled) > 0
    assert b.ci_high - b.ci_low > a.ci_high - a.ci_low


def test_labels_weighted_by_their_results_weights():
    # two labelled results of weight 10 (one fails) and two of weight 1 (both pass): 10/22 fail
    fail = VerdictLabels.of([(True, 10.0), (False, 10.0), (False, 1.0), (False, 1.0)] * 5)
    assert fail.rate == pytest.approx(10 / 22) and fail.size < fail.n


def test_too_few_labels_give_no_rate_and_say_which_verdict_is_short():
    judged = WeightedCounts.unweighted(1000, 325)
    r = corrected_rate(judged, VerdictLabels.counted(3, 1), VerdictLabels.counted(50, 0))
    assert r.rate is None and r.ci_low is None and r.labels == 53
    assert r.reason.startswith("not enough labels: fail 3 (at least 10 per verdict the judge gave")
    assert f"at least {MIN_LABELS}" in r.reason
    # a verdict the window does not hold needs no labels
    none_failed = corrected_rate(WeightedCounts.unweighted(500, 0), VerdictLabels(), VerdictLabels.counted(40, 1))
    assert none_failed.rate == pytest.approx(1 / 40) and none_failed.labels == 40
    assert corrected_rate(WeightedCounts(), VerdictLabels(), VerdictLabels()).reason == "nothing judged in the period"


def test_a_judge_no_better_than_chance_is_no_better_than_labels_alone():
    # fpr + fnr = 1: both verdicts hold failures at the true rate; the split in two strata costs width
    judged = WeightedCounts.unweighted(10_000, 5000)
    r = corrected_rate(judged, VerdictLabels.counted(75, 8), VerdictLabels.counted(75, 7))
    lo, hi = wilson(15 / 150, 150)
    assert r.rate == pytest.approx(0.1)
    assert r.ci_high - r.ci_low >= 0.95 * (hi - lo)
