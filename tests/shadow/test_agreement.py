"""The shadow report's statistics against values worked out by hand."""

from __future__ import annotations

import math
import random

import pytest

from judgeflow.shadow.agreement import Z95, Confusion, kappa, kappa_undefined, mean_difference, rate_difference


def test_confusion_from_decisions():
    c = Confusion.of([(False, False)] * 5 + [(False, True)] * 3 + [(True, False)] + [(True, True)] * 2)
    assert c.as_json() == {"both_pass": 5, "only_candidate_fails": 3, "only_current_fails": 1, "both_fail": 2}
    assert (c.n, c.current_failing, c.candidate_failing) == (11, 3, 5)


def test_kappa_by_hand():
    c = Confusion(both_pass=40, only_candidate_fails=10, only_current_fails=5, both_fail=45)
    # po = 0.85; current passes 50/100, candidate 45/100: pe = 0.5*0.45 + 0.5*0.55 = 0.5
    k, ci = kappa(c)
    assert k == pytest.approx(0.7)
    # Fleiss-Cohen-Everitt (1969), rows the current judge (pass, fail), columns the candidate:
    # diagonal  .40 (1 - (.50 + .45) .3)^2 + .45 (1 - (.50 + .55) .3)^2 = .20449 + .21115125
    # off it    .3^2 (.10 (.45 + .50)^2 + .05 (.55 + .50)^2) = .01308375
    # minus     (.7 - .5 * .3)^2 = .3025; over n (1 - pe)^2 = 25
    se = math.sqrt((0.20449 + 0.21115125 + 0.01308375 - 0.3025) / 25)
    assert ci.as_json() == pytest.approx([0.7 - Z95 * se, 0.7 + Z95 * se])
    assert kappa(Confusion(both_pass=10)) == (None, None)  # one class only: undefined
    assert kappa(Confusion()) == (None, None)


def _bootstrap_se(c: Confusion, rounds: int = 4000) -> float:
    pairs = ([(False, False)] * c.both_pass + [(False, True)] * c.only_candidate_fails
             + [(True, False)] * c.only_current_fails + [(True, True)] * c.both_fail)
    rng = random.Random(7)
    ks = []
    for _ in range(rounds):
        k, _ = kappa(Confusion.of(rng.choices(pairs, k=len(pairs))))
        if k is not None:
            ks.append(k)
    mean = math.fsum(ks) / len(ks)
    return math.sqrt(math.fsum((k - mean) ** 2 for k in ks) / (len(ks) - 1))


@pytest.mark.parametrize("cells", [(139, 18, 0, 29), (300, 25, 12, 20), (90, 8, 1, 1)])
def test_kappa_interval_matches_a_bootstrap(cells):
    c = Confusion(*cells)
    k, ci = kappa(c)
    half = (ci.high - ci.low) / 2 / Z95  # none of these intervals is clipped
    assert half == pytest.approx(_bootstrap_se(c), rel=0.12)


def test_kappa_where_a_judge_never_fails_is_undefined_not_zero_plus_minus_something():
    never = Confusion(both_pass=80, only_candidate_fails=20)  # the current judge never fails
    assert kappa(never) == (None, None)
    assert kappa_undefined(never) == "undefined: one judge never fails (the current judge)"
    assert kappa_undefined(Confusion(both_pass=80, only_current_fails=3)) == (
        "undefined: one judge never fails (the candidate)")
    assert kappa_undefined(Confusion(both_fail=5, only_current_fails=2)) == (
        "undefined: one judge always fails (the current judge)")
    assert kappa_undefined(Confusion(both_pass=10)) == "undefined: neither judge fails"
    assert kappa_undefined(Confusion()) == "undefined: no pairs"
    assert kappa_undefined(Confusion(40, 10, 5, 45)) is None


def test_a_segment_where_the_judges_never_disagree_has_an_interval_of_some_width():
    d, ci = rate_difference(Confusion(both_pass=17, both_fail=3))
    assert d == 0.0
    assert ci.low < 0 < ci.high  # Agresti-Min: not the Wald interval's [0, 0]
    # b = c = 0.5, n = 22: d2 = 0, se = sqrt(1) / 22
    assert ci.as_json() == pytest.approx([-Z95 / 22, Z95 / 22])


def test_mean_difference():
    mean, ci = mean_difference([0.0, 1.0, 0.0, 1.0])
    assert mean == 0.5
    half = Z95 * math.sqrt(1 / 3) / 2  # sample sd sqrt(1/3), n = 4
    assert ci.as_json() == pytest.approx([0.5 - half, 0.5 + half])
    assert mean_difference([0.25]) == (0.25, None)
