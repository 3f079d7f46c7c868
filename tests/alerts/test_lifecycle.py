"""Holm's correction over the segments a regression rule tests in one evaluation."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from judgeflow.alerts.evaluation import OVERALL, Figures, Segment
from judgeflow.alerts.lifecycle import correct_for_family, decide
from judgeflow.alerts.rules import all_rules
from judgeflow.config.settings import Settings

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


def _rules(**values):
    s = Settings(_env_file=None, alert_min_samples=50, toxicity_regression_min_increase=0.05, toxicity_rate_max=0.1,
                 alert_segment_by="app", **values)
    return {r.name: r for r in all_rules(s)}


def _figures(app: str | None, p: float | None, *, value=0.12, samples=60, base_samples=400) -> Figures:
    return Figures(
        value=value, violations=round(value * samples), sample_size=samples, failed=0, worst=[], evaluated_at=NOW,
        window_start=NOW - timedelta(days=1), segment=OVERALL if app is None else Segment("app", app),
        baseline_value=0.02, baseline_violations=round(0.02 * base_samples), baseline_sample_size=base_samples,
        p_value=p,
    )


def _family(p_b: float, p_c: float = 0.6) -> list[Figures]:
    """Overall and six apps, one evaluation: app b (and c) with a 10-point rise at ``p_b`` (``p_c``)."""
    return [_figures(None, 0.3, value=0.03)] + [_figures("b", p_b), _figures("c", p_c)] + [
        _figures(a, 0.5, value=0.02) for a in ("d", "e", "f", "g")
    ]


def _decisions(rule, family, state="ok"):
    return {f.segment.label: decide(rule, f, state=state, last_notified_at=None, now=NOW)[:2] for f in family}


def test_a_rise_significant_alone_does_not_fire_when_seven_segments_were_tested():
    rule = _rules()["toxicity_regression"]
    family = _family(p_b=0.004)
    # uncorrected, app b would fire: 0.004 <= alpha 0.01
    assert _decisions(rule, family)["app=b"] == ("firing", "firing")
    corrected = correct_for_family(rule, family)
    b = next(f for f in corrected if f.segment.label == "app=b")
    assert b.p_value == 0.004 and b.p_adjusted == pytest.approx(7 * 0.004) and b.family_size == 7
    assert _decisions(rule, corrected)["app=b"] == ("ok", "ok")
    assert all(state == "ok" for _, state in _decisions(rule, corrected).values())


def test_a_strong_regression_still_fires_and_only_it():
    rule = _rules()["toxicity_regression"]
    corrected = correct_for_family(rule, _family(p_b=1e-9, p_c=0.004))
    states = {label: state for label, (_, state) in _decisions(rule, corrected).items()}
    assert states["app=b"] == "firing"
    # Holm steps down: c is held to alpha / 6, and 6 x 0.004 > 0.01
    assert states["app=c"] == "ok" and [s for s in states.values()].count("firing") == 1


def test_a_firing_segment_stays_firing_at_the_looser_resolve_alpha_after_correction():
    rule = _rules()["toxicity_regression"]
    # adjusted 7 x 0.005 = 0.035: above alpha 0.01 (would not fire), below the resolve alpha 0.05 (stays)
    corrected = correct_for_family(rule, _family(p_b=0.005))
    assert _decisions(rule, corrected, state="firing")["app=b"] == ("firing", "firing")
    # adjusted 7 x 0.008 = 0.056: above the resolve alpha too, so it resolves
    corrected = correct_for_family(rule, _family(p_b=0.008))
    assert _decisions(rule, corrected, state="firing")["app=b"] == ("ok", "ok")


def test_segments_that_cannot_decide_are_not_in_the_family():
    rule = _rules()["toxicity_regression"]
    family = _family(p_b=0.004)
    # five of the segments short of the minimum: overall and b are the only tests
    family = family[:2] + [replace(f, sample_size=10) for f in family[2:]]
    corrected = correct_for_family(rule, family)
    assert [f.family_size for f in corrected[:2]] == [2, 2]
    assert all(f.p_adjusted is None for f in corrected[2:])
    b = corrected[1]
    assert b.p_adjusted == pytest.approx(0.008)
    assert decide(rule, b, state="ok", last_notified_at=None, now=NOW)[:2] == ("firing", "firing")


def test_maximum_rules_and_a_single_test_are_unchanged():
    rules = _rules()
    family = _family(p_b=0.004)
    assert correct_for_family(rules["toxicity_rate"], family) == family
    [alone] = correct_for_family(rules["toxicity_regression"], family[1:2])
    assert alone.p_adjusted == 0.004 and alone.family_size == 1


def test_a_stratum_judged_at_exactly_the_minimum_has_enough_samples_whatever_its_weight():
    """Kish's size of 50 equal weights is 49.99999999999999 for many weights: the
    minimum-samples gate kept a stratum the plan sized at the minimum from ever paging."""
    from judgeflow.alerts.estimates import StratumCounts, WeightedCounts, estimate
    from judgeflow.alerts.evaluation import figures_from_counts
    from judgeflow.alerts.lifecycle import enough_data

    rule = _rules()["toxicity_regression"]
    below = [N for N in range(51, 1200) if estimate(WeightedCounts.from_strata([StratumCounts(50, 9, 50 / N)])).n_eff < 50]
    assert below, "the float residue this test is about no longer occurs"
    for N in below[:50]:
        window = WeightedCounts.from_strata([StratumCounts(50, 9, 50 / N)])
        base = WeightedCounts.from_strata([StratumCounts(350, 7, 50 / N)])
        f = figures_from_counts(window, base, failed=0, evaluated_at=NOW, window_start=NOW)
        assert enough_data(rule, f)
        assert decide(rule, f, state="ok", last_notified_at=None, now=NOW)[2] == "fired"
    # one sample short is still short
    short = figures_from_counts(WeightedCounts.from_strata([StratumCounts(49, 9, 49 / 300)]),
                                WeightedCounts.from_strata([StratumCounts(350, 7, 50 / 300)]), failed=0,
                                evaluated_at=NOW, window_start=NOW)
    assert not enough_data(rule, short)
