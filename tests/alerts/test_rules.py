"""Rules built from settings, and the state machine's decisions (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from judgeflow.alerts.evaluation import Figures
from judgeflow.alerts.rules import all_rules, enabled_rules, rule_specs
from judgeflow.alerts.state import decide
from judgeflow.config.settings import Settings

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


def settings(**values) -> Settings:
    return Settings(_env_file=None, **values)


def figures(value, samples, *, base=None, p_value=None):
    base_value, base_samples = base or (None, 0)
    return Figures(
        value=value, violations=round((value or 0) * samples), sample_size=samples, failed=0, worst=[],
        evaluated_at=NOW, window_start=NOW - timedelta(days=1),
        baseline_value=base_value, baseline_violations=round((base_value or 0) * base_samples),
        baseline_sample_size=base_samples, p_value=p_value,
    )


def test_rules_from_settings():
    rules = {r.name: r for r in all_rules(settings(alert_window="6h", alert_min_samples=20, alert_renotify="2h"))}
    assert list(rules) == [
        "toxicity_rate", "toxicity_session_rate", "hallucination_rate", "hallucination_session_rate",
        "judge_failure_rate", "toxicity_regression", "toxicity_session_regression", "hallucination_regression",
        "hallucination_session_regression", "dead_delivery_rate", "phoenix_unwritten",
    ]
    tox = rules["toxicity_rate"]
    assert (tox.kind, tox.metric, tox.maximum, tox.enabled) == ("not_passed_rate", "toxicity", 0.05, True)
    assert (tox.window, tox.window_s, tox.min_samples, tox.renotify_s) == ("6h", 21600, 20, 7200)
    assert tox.env_var == "JUDGEFLOW_TOXICITY_RATE_MAX" and tox.resource_id == "judgeflow.rule.toxicity_rate"
    assert not rules["hallucination_rate"].enabled and not rules["judge_failure_rate"].enabled
    # each trace metric's session rate has rules of its own: the rate's maximum defaults to the trace metric's
    # (toxicity's on, the others off); no session regression rule is on by default
    session = rules["toxicity_session_rate"]
    assert (session.kind, session.metric, session.maximum, session.env_var) == (
        "not_passed_rate", "toxicity_session", 0.05, "JUDGEFLOW_TOXICITY_SESSION_RATE_MAX")
    assert not rules["hallucination_session_rate"].enabled
    assert not any(rules[f"{m}_session_regression"].enabled for m in ("toxicity", "hallucination"))
    assert (rules["judge_failure_rate"].kind, rules["judge_failure_rate"].metric) == ("failure_rate", None)
    # on by default: any dead delivery in the window fires it; no minimum sample, never per segment
    dead = rules["dead_delivery_rate"]
    assert (dead.kind, dead.metric, dead.maximum, dead.enabled) == ("dead_deliveries", None, 0.0, True)
    assert (dead.min_samples, dead.segment_by, dead.env_var) == (0, (), "JUDGEFLOW_DEAD_DELIVERY_RATE_MAX")
    # off but for a Phoenix source writing back; then any result a write failed for, unwritten a day later, fires it
    unwritten = rules["phoenix_unwritten"]
    assert (unwritten.kind, unwritten.enabled, unwritten.env_var) == (
        "unwritten_results", False, "JUDGEFLOW_PHOENIX_UNWRITTEN_MAX_AGE")
    phoenix = {r.name: r for r in all_rules(settings(source="phoenix", phoenix_write_back=True))}["phoenix_unwritten"]
    assert (phoenix.maximum, phoenix.max_age_s, phoenix.min_samples, phoenix.segment_by) == (0.0, 86400, 0, ())
    assert not {r.name: r for r in all_rules(settings(source="phoenix"))}["phoenix_unwritten"].enabled
    off = settings(source="phoenix", phoenix_write_back=True, phoenix_unwritten_max_age="")
    assert not {r.name: r for r in all_rules(off)}["phoenix_unwritten"].enabled


def test_each_rule_is_enabled_by_its_own_maximum():
    s = settings(toxicity_rate_max=None, hallucination_rate_max=0.2, failure_rate_max=0.1, dead_delivery_rate_max=0.5,
                 toxicity_session_rate_max=None, hallucination_session_rate_max=0.3)
    assert [(r.name, r.maximum) for r in enabled_rules(s)] == [
        ("hallucination_rate", 0.2), ("hallucination_session_rate", 0.3), ("judge_failure_rate", 0.1),
        ("dead_delivery_rate", 0.5),
    ]
    assert enabled_rules(settings(toxicity_rate_max=None, dead_delivery_rate_max=None,
                                  toxicity_session_rate_max=None)) == []


def test_every_spec_names_a_setting():
    from judgeflow.config.settings import setting_fields

    assert [spec.name for spec in rule_specs()] == [
        "toxicity_rate", "toxicity_session_rate", "hallucination_rate", "hallucination_session_rate",
        "judge_failure_rate", "toxicity_regression", "toxicity_session_regression", "hallucination_regression",
        "hallucination_session_regression", "dead_delivery_rate", "phoenix_unwritten",
    ]
    for spec in rule_specs():
        assert spec.setting in setting_fields()


def test_settings_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_HALLUCINATION_RATE_MAX", "0.3")
    monkeypatch.setenv("JUDGEFLOW_ALERT_WINDOW", "7d")
    monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_RETRIES", "5")
    s = Settings()
    assert [r.name for r in enabled_rules(s)] == ["toxicity_rate", "toxicity_session_rate", "hallucination_rate",
                                                  "dead_delivery_rate"]
    assert all_rules(s)[0].window_s == 7 * 86400 and s.alert_webhook_retries == 5


@pytest.mark.parametrize(
    "state, value, samples, last_notified_ago, expected",
    [
        ("ok", 0.04, 100, None, ("ok", "ok", None)),
        ("ok", 0.05, 100, None, ("ok", "ok", None)),  # at the maximum is not above it
        ("ok", 0.06, 100, None, ("firing", "firing", "fired")),
        ("ok", 0.90, 49, None, ("not_enough_data", "ok", None)),
        ("firing", 0.90, 49, 10, ("not_enough_data", "firing", None)),
        ("firing", None, 0, 10, ("not_enough_data", "firing", None)),
        ("firing", 0.06, 100, 10, ("firing", "firing", None)),
        # hysteresis (10%): once firing, it resolves only at or below 0.045
        ("firing", 0.05, 100, 10, ("firing", "firing", None)),
        ("firing", 0.046, 1000, 10, ("firing", "firing", None)),
        ("firing", 0.045, 1000, 10, ("ok", "ok", "resolved")),
    ],
)
def test_decide(state, value, samples, last_notified_ago, expected):
    rule = all_rules(settings(alert_min_samples=50))[0]
    last = NOW - timedelta(seconds=last_notified_ago) if last_notified_ago is not None else None
    assert decide(rule, figures(value, samples), state=state, last_notified_at=last, now=NOW) == expected


def test_decide_reminds_only_after_the_interval():
    rule = all_rules(settings(alert_min_samples=50, alert_renotify="1h"))[0]
    f = figures(0.5, 100)
    just_before = NOW - timedelta(minutes=59, seconds=59)
    assert decide(rule, f, state="firing", last_notified_at=just_before, now=NOW)[2] is None
    assert decide(rule, f, state="firing", last_notified_at=NOW - timedelta(hours=1), now=NOW)[2] == "reminder"
    # a reminder is never sent while there is not enough data
    assert decide(rule, figures(0.5, 10), state="firing", last_notified_at=NOW - timedelta(days=1), now=NOW)[2] is None


def test_regression_rules_are_enabled_by_their_minimum_increase():
    s = settings(toxicity_rate_max=None, toxicity_regression_min_increase=0.02, regression_baseline="3d",
                 dead_delivery_rate_max=None, toxicity_session_rate_max=None)
    [rule] = enabled_rules(s)
    assert (rule.name, rule.kind, rule.metric, rule.maximum, rule.min_increase) == (
        "toxicity_regression", "regression", "toxicity", None, 0.02,
    )
    assert (rule.baseline_s, rule.alpha, rule.resolve_alpha, rule.env_var) == (
        3 * 86400, 0.01, 0.05, "JUDGEFLOW_TOXICITY_REGRESSION_MIN_INCREASE",
    )


def test_segment_keys_from_settings():
    s = settings(alert_segment_by=" app, model ,app,", alert_segment_top=3)
    assert s.alert_segment_keys == ("app", "model")
    assert all(
        r.segment_by == ("app", "model") and r.segment_top == 3 for r in all_rules(s)
        if r.kind not in ("dead_deliveries", "unwritten_results")
    )
    assert [r.segment_by for r in all_rules(s) if r.kind in ("dead_deliveries", "unwritten_results")] == [(), ()]
    assert settings().alert_segment_keys == ()


@pytest.mark.parametrize(
    "state, value, base, p_value, expected",
    [
        ("ok", 0.05, (0.01, 500), 0.001, ("firing", "firing", "fired")),
        ("ok", 0.05, (0.01, 500), 0.02, ("ok", "ok", None)),  # a rise, not significant at 1%
        ("ok", 0.02, (0.01, 500), 0.0001, ("ok", "ok", None)),  # significant, but under the minimum increase
        ("ok", 0.01, (0.05, 500), 0.99, ("ok", "ok", None)),  # an improvement
        ("ok", 0.05, (0.01, 49), 0.001, ("not_enough_data", "ok", None)),  # baseline too small
        ("firing", 0.05, (0.01, 49), 0.001, ("not_enough_data", "firing", None)),
        # hysteresis: stays firing at p 0.03 and an increase of 0.019 (>= 0.9 * 0.02) ...
        ("firing", 0.029, (0.01, 500), 0.03, ("firing", "firing", None)),
        # ... resolves when the rise is not significant even at 5%, or falls below 0.018
        ("firing", 0.05, (0.01, 500), 0.06, ("ok", "ok", "resolved")),
        ("firing", 0.027, (0.01, 500), 0.001, ("ok", "ok", "resolved")),
    ],
)
def test_decide_regression(state, value, base, p_value, expected):
    rule = {r.name: r for r in all_rules(settings(alert_min_samples=50, toxicity_regression_min_increase=0.02))}[
        "toxicity_regression"
    ]
    f = figures(value, 1000, base=base, p_value=p_value)
    assert decide(rule, f, state=state, last_notified_at=NOW, now=NOW) == expected
