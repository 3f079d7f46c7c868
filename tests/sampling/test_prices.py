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
