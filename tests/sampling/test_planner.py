"""What the planner sizes strata for: the regression rule's family of tests and its minimum rise."""

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
