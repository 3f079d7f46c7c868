"""judgeflow/calibration/label_sampling.py: the allocation rule, the stratified draw and the plan's
figures checked against a hand computation."""

from __future__ import annotations

import math
import random
from collections import Counter

from judgeflow.calibration.label_sampling import FAIL, PASS, allocate, draw, half_width, plan

Z95 = 1.959963984540054


def test_half_to_each_verdict_capped_the_rest_to_the_other():
    assert allocate(100, {FAIL: 30, PASS: 970}) == {FAIL: 30, PASS: 70}  # the rare stratum whole
    assert allocate(100, {FAIL: 500, PASS: 9500}) == {FAIL: 50, PASS: 50}
    assert allocate(7, {FAIL: 500, PASS: 9500}) == {FAIL: 4, PASS: 3}  # the odd one to the rarer
    assert allocate(10, {FAIL: 0, PASS: 40}) == {FAIL: 0, PASS: 10}
    assert allocate(50, {FAIL: 5, PASS: 40}) == {FAIL: 5, PASS: 40}  # n past the population: all of it


def test_the_draw_is_stratified_reproducible_and_not_grouped():
    strata = {FAIL: [f"f{i:03}" for i in range(40)], PASS: [f"p{i:04}" for i in range(960)]}
    sizes, picked = draw(strata, 100, random.Random(7))
    assert sizes == {FAIL: 40, PASS: 60}
    assert Counter(h for _, h in picked) == {FAIL: 40, PASS: 60}
    assert all(u.startswith(h[0]) for u, h in picked) and len({u for u, _ in picked}) == 100
    assert draw(strata, 100, random.Random(7)) == (sizes, picked)  # the seed repeats it
    # strata mixed: the first 40 lines are not the failed stratum
    assert Counter(h for _, h in picked[:40])[PASS] > 10
    # simple random sampling within a stratum: over seeds fixed in advance (0..199), each passed unit is
    # drawn with probability 60/960 = 1/16; the first unit's share stays within 4 standard errors
    hits = sum(any(u == "p0000" for u, _ in draw(strata, 100, random.Random(s))[1]) for s in range(200))
    assert abs(hits / 200 - 1 / 16) < 4 * math.sqrt((1 / 16) * (15 / 16) / 200)


def test_plan_without_labels_uses_the_worst_case_prior():
    result = plan({FAIL: 100.0, PASS: 900.0}, {}, half_width_target=0.02, confidence=0.95)
    # by hand: W = .1, .9; p = .5; n = z^2 (sum W_h S_h)^2 / h^2 = z^2 * .25 / .0004 = 2400.99
    total = Z95 ** 2 * (0.1 * 0.5 + 0.9 * 0.5) ** 2 / 0.02 ** 2
    assert {s.name: s.more for s in result.strata} == {FAIL: math.ceil(0.1 * total), PASS: math.ceil(0.9 * total)}
    assert result.more == 241 + 2161 and result.current_half_width is None
    assert {s.p for s in result.strata} == {0.5}


def test_plan_with_labels_from_their_disagreement():
    # failed stratum: 10 labels, 8 fail by people; passed: 20 labels, 2 fail
    result = plan({FAIL: 100.0, PASS: 900.0}, {FAIL: (10, 8), PASS: (20, 2)}, half_width_target=0.05)
    p_f, p_p = 9 / 12, 3 / 22  # Beta(1,1) posterior means
    now = Z95 * math.sqrt(0.1 ** 2 * p_f * (1 - p_f) / 10 + 0.9 ** 2 * p_p * (1 - p_p) / 20)
    assert math.isclose(result.current_half_width, now)
    s_f, s_p = 0.1 * math.sqrt(p_f * (1 - p_f)), 0.9 * math.sqrt(p_p * (1 - p_p))
    total = Z95 ** 2 * (s_f + s_p) ** 2 / 0.05 ** 2  # Neyman: final n_h = total * W_h S_h / sum
    want_f, want_p = total * s_f / (s_f + s_p), total * s_p / (s_f + s_p)
    assert want_f > 10 and want_p > 20  # neither stratum is already past its share here
    assert {s.name: s.more for s in result.strata} == {FAIL: math.ceil(want_f) - 10, PASS: math.ceil(want_p) - 20}
    w = {s.name: s.more + s.labels for s in result.strata}
    assert half_width([(0.1, p_f, w[FAIL]), (0.9, p_p, w[PASS])], 0.95) <= 0.05


def test_a_stratum_past_its_share_keeps_its_labels_and_the_other_makes_up():
    # 400 labels in the small failed stratum already: only the passed stratum gets more
    result = plan({FAIL: 100.0, PASS: 900.0}, {FAIL: (400, 200), PASS: (10, 5)}, half_width_target=0.05)
    p_f, p_p = 201 / 402, 6 / 12
    room = (0.05 / Z95) ** 2 - 0.1 ** 2 * p_f * (1 - p_f) / 400
    assert {s.name: s.more for s in result.strata} == {
        FAIL: 0, PASS: math.ceil(0.9 ** 2 * p_p * (1 - p_p) / room) - 10}
    assert plan({FAIL: 1.0, PASS: 1.0}, {FAIL: (5000, 2500), PASS: (5000, 2500)}, half_width_target=0.05).more == 0
