"""The shadow report's statistics against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from judgeflow.shadow.agreement import Z95, Confusion, kappa, mean_difference, rate_difference


def test_confusion_from_decisions():
    c = Confusion.of([(False, False)] * 5 + [(False, True)] * 3 + [(True, False)] + [(True, True)] * 2)
    assert c.as_json() == {"both_pass": 5, "only_candidate_fails": 3, "only_current_fails": 1, "both_fail": 2}
    assert (c.n, c.current_failing, c.candidate_failing) == (11, 3, 5)


def test_kappa_by_hand():
    c = Confusion(both_pass=40, only_candidate_fails=10, only_current_fails=5, both_fail=45)
    # po = 0.85; current passes 50/100, candidate 45/100: pe = 0.5*0.45 + 0.5*0.55 = 0.5
    k, ci = kappa(c)
    assert k == pytest.approx(0.7)
    se = math.sqrt(0.85 * 0.15 / (100 * 0.25))
    assert ci.as_json() == pytest.approx([0.7 - Z95 * se, 0.7 + Z95 * se])
    assert kappa(Confusion(both_pass=10)) == (None, None)  # one class only: undefined
    assert kappa(Confusion()) == (None, None)


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
