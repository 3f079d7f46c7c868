"""What the planner sizes strata for: the regression rule's family of tests and its minimum rise."""

import pytest

from judgeflow.sampling.planner import detect_for, family_size
from judgeflow.config.settings import Settings


def _settings(**values) -> Settings:
    return Settings(_env_file=None, **values)


def test_the_family_is_overall_and_each_segment_the_strata_hold():
    s = _settings(alert_segment_by="app", alert_segment_top=10)
    assert family_size(s, ["app=a", "app=b", "app=other"]) == 4
    # two keys: each key's values are segments of their own
    s2 = _settings(alert_segment_by="app,model")
    assert family_size(s2, ["app=a,model=m1", "app=a,model=m2", "app=b,model=m1"]) == 1 + 2 + 2
    # capped at the top N and 'other'
    assert family_size(_settings(alert_segment_by="app", alert_segment_top=2), [f"app={i}" for i in range(9)]) == 4
    # no segment keys: overall alone
    assert family_size(_settings(), ["all"]) == 1


def test_strata_are_sized_for_the_smallest_minimum_rise_at_the_segment_alpha():
    s = _settings(alert_segment_by="app", toxicity_regression_min_increase=0.05,
                  hallucination_regression_min_increase=0.03, regression_alpha=0.01, alert_window="24h",
                  regression_baseline="7d")
    detect = detect_for(s, ["app=a", "app=b"])
    assert (detect.min_increase, detect.alpha, detect.tests, detect.ratio) == (0.03, 0.01, 3, 7.0)
    assert detect_for(_settings(alert_segment_by="app"), ["app=a"]) is None  # no regression rule enabled


def test_a_stratum_judged_fewer_than_planned_has_its_rise_restated_for_what_was_judged():
    from datetime import date

    from judgeflow.sampling.planner import Claim, NightPlan, StratumRow, restate
    from judgeflow.sampling.power import min_detectable_rise

    claim = Claim(alpha=0.05 / 3, ratio=7, min_increase=0.05, min_samples=50, sized_rise=0.075)
    rows = [StratumRow(s, 1000, 200, 2.0, 0.2, claim.rise(200, 0.03)) for s in ("app=a", "app=b", "app=c")]
    plan = NightPlan(date(2026, 11, 27), 6.0, 0.0, 30.0, True, rows, claim=claim,
                     rates={"app=a": 0.03, "app=b": 0.03, "app=c": 0.03})
    notes = restate(plan, {"app=a": 200, "app=b": 120, "app=c": 30})
    a, b, c = plan.rows
    assert a.min_detectable_rise == rows[0].min_detectable_rise  # judged as planned: unchanged
    assert b.min_detectable_rise == min_detectable_rise(120, 840, 0.03, alpha=0.05 / 3, min_increase=0.05,
                                                        min_samples=50)
    assert b.min_detectable_rise > a.min_detectable_rise
    assert c.min_detectable_rise is None  # fewer than the minimum samples: the rule cannot decide
    assert len(notes) == 2 and "app=b: 120 of the 200 planned" in notes[0] and "n/a" in notes[1]
    plan.restated = notes
    assert plan.notes()[-2:] == notes
    assert "sized to see a true rise of 7.5 pts (1.5 times that)" in plan.notes()[1]


def test_a_regression_rule_with_segment_keys_of_its_own_is_sized_for_its_own_family(tmp_path):
    """A file metric's segment_by makes its regression rule's family; the strata are sized for the largest."""
    from judgeflow.run.metric_door import open_metrics

    path = tmp_path / "metrics.toml"
    path.write_text('[metrics.helpfulness]\ncriteria = "Helps."\nevaluation_steps = ["Read it."]\n'
                    'regression = 0.02\nsegment_by = []\n', encoding="utf-8")
    try:
        open_metrics(path)  # as the entry point whose settings name it does
        alone = _settings(metrics_file=str(path), alert_segment_by="app")
        assert family_size(alone, ["app=a", "app=b"], alone.metric_segment_keys("helpfulness")) == 1
        assert (detect_for(alone, ["app=a", "app=b"]).tests, detect_for(alone, ["app=a"]).min_increase) == (1, 0.02)
        both = _settings(metrics_file=str(path), alert_segment_by="app", toxicity_regression_min_increase=0.05)
        assert (detect_for(both, ["app=a", "app=b"]).tests, detect_for(both, ["app=a"]).min_increase) == (3, 0.02)
    finally:
        open_metrics(None)


def test_a_strata_cost_spread_is_its_traces_estimates_and_each_bills_own_spread():
    from datetime import datetime, timezone

    from judgeflow.sampling.strata import Traffic
    from judgeflow.sources.types import TraceKey

    traffic = Traffic()
    at = datetime(2026, 11, 29, tzinfo=timezone.utc)
    for i, cost in enumerate((1.0, 3.0)):
        traffic.add("app=a", TraceKey(f"t{i}", at), {"toxicity": cost / 2, "hallucination": cost / 2})
    assert traffic.cost_per_trace("app=a", ["toxicity", "hallucination"]) == 2.0
    assert traffic.cost_sd("app=a", ["toxicity", "hallucination"], 0.0) == 1.0  # the estimates' own spread
    assert traffic.cost_sd("app=a", ["toxicity", "hallucination"], 0.3) == (1.0 + 0.6 ** 2) ** 0.5


def test_a_top_up_replaces_the_rows_of_the_strata_it_raised_and_adds_its_note():
    from datetime import date

    from judgeflow.sampling.planner import NightPlan, StratumRow

    first = NightPlan(date(2026, 11, 29), 6.0, 0.0, 30.0, True,
                      [StratumRow("app=a", 100, 20, 0.2, 0.2, None), StratumRow("app=b", 50, 10, 0.1, 0.2, None)])
    later = NightPlan(date(2026, 11, 29), 6.0, 5.0, 30.0, True,
                      [StratumRow("app=a", 100, 35, 0.15, 0.35, None), StratumRow("app=b", 4, 1, 0.01, 0.2, None)],
                      topped_up=["the run's selection was judged"])
    first.absorb(later)
    assert [(r.stratum, r.judged) for r in first.rows] == [("app=a", 35), ("app=b", 10)]  # late traces alone: kept
    assert first.rows[0].est_cost_usd == pytest.approx(0.35)  # the first picks' and the new picks' estimates
    assert first.notes()[-1] == "the run's selection was judged"
