"""Tonight's prices (judgeflow/sampling/prices.py): the token estimate
corrected per judge model by what the judge billed, and the spread of a
trace's bill about its estimate."""

from __future__ import annotations

import random

import pytest

from judgeflow.sampling.prices import DEFAULT_SPREAD, MIN_PAIRS, PriceCorrection, correction


def test_each_model_is_corrected_by_its_own_bills_over_their_estimates():
    rng = random.Random(5)
    pairs = [("m1", 0.5 * e * rng.lognormvariate(0, 0.3), e) for e in (rng.uniform(1, 3) for _ in range(400))]
    pairs += [("m2", 1.2 * e, e) for e in (1.0, 2.0) * 15]
    got = correction(pairs)
    assert got.ratio("m1") == pytest.approx(0.5 * 1.046, rel=0.06)  # a lognormal's mean is exp(sd^2 / 2)
    assert got.ratio("m2") == pytest.approx(1.2)
    # a bill strays from its corrected estimate by about the lognormal's coefficient of variation
    assert got.spread == pytest.approx(0.307, abs=0.05)


def test_a_model_with_too_few_results_keeps_its_estimate_and_no_history_keeps_the_default_spread():
    got = correction([("m1", 2.0, 1.0)] * (MIN_PAIRS - 1) + [("m2", 1.0, 0.0), ("m2", 0.0, 1.0)])
    assert got.ratios == {} and got.ratio("m1") == 1.0
    assert got.spread == DEFAULT_SPREAD
    assert PriceCorrection().ratio("any") == 1.0


def test_a_trace_is_corrected_by_its_own_bands_ratio_and_an_unseen_band_never_below_its_estimate():
    short = [("m", 0.75 * e, e) for e in (1.1, 1.3, 1.5) * 10]  # band 0: billed 0.75x
    long = [("m", 1.0 * e, e) for e in (4.5, 5.0, 6.0) * 10]  # band 2: billed as estimated
    got = correction(short + long)
    assert got.ratio("m", 1.2) == pytest.approx(0.75) and got.ratio("m", 5.5) == pytest.approx(1.0)
    only_short = correction(short)
    assert only_short.ratio("m", 1.2) == pytest.approx(0.75)
    assert only_short.ratio("m", 40.0) == 1.0  # traces turned long: at least their estimate
    dear = correction([("m", 2.0 * e, e) for e in (1.1, 1.3, 1.5) * 10])
    assert dear.ratio("m", 40.0) == pytest.approx(2.0)  # ... and at least what the history billed
