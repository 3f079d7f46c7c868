"""Alert rules decide on weighted rates (issue 40): a sampled trace weighs
1 / its inclusion probability; a fully judged night gives today's figures."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from judgeflow.alerts import evaluate_rules
from judgeflow.alerts.evaluation import segment_figures
from judgeflow.alerts.rules import all_rules
from judgeflow.alerts.stats import fisher_greater
from tests.alerts.helpers import add_results, make_settings


def _sample(engine, segment: dict, prob: float, *, selected: bool = True) -> int:
    """Record every result of ``segment`` as judged under a sample with inclusion probability ``prob``."""
    with engine.begin() as conn:
        return conn.execute(
            sa.text(
                """
                INSERT INTO judgeflow.sample_decisions (trace_id, night, stratum, inclusion_prob, selected, created_at)
                SELECT trace_id, (trace_created_at AT TIME ZONE 'UTC')::date, 'app=' || (segment ->> 'app'), :p, :sel,
                       trace_created_at
                FROM judgeflow.eval_results WHERE segment @> CAST(:seg AS jsonb)
                ON CONFLICT DO NOTHING
                """
            ),
            {"p": prob, "sel": selected, "seg": __import__("json").dumps(segment)},
        ).rowcount


def _rule(settings, name):
    return next(r for r in all_rules(settings) if r.name == name)


def _now(engine):
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.now())).scalar_one()


def test_a_fully_judged_night_gives_todays_figures(engine, database_url):
    settings = make_settings(database_url, toxicity_regression_min_increase=0.02, alert_segment_by="app")
    add_results(engine, passed=180, not_passed=20, segment={"app": "a"})
    add_results(engine, passed=95, not_passed=5, segment={"app": "b"})
    add_results(engine, passed=1300, not_passed=100, segment={"app": "a"}, age=timedelta(days=3))
    rule, now = _rule(settings, "toxicity_regression"), _now(engine)
    with engine.connect() as conn:
        before = segment_figures(conn, rule, now=now) + segment_figures(conn, rule, now=now, key="app")
    # today's code path: plain counts and Fisher's test on them
    overall = before[0]
    assert (overall.value, overall.baseline_value) == (25 / 300, 100 / 1400)
    assert overall.p_value == fisher_greater(25, 300, 100, 1400)
    # the night judged in full under a sample plan (every probability 1): the same figures, exactly
    assert _sample(engine, {"app": "a"}, 1.0) + _sample(engine, {"app": "b"}, 1.0) == 1700
    with engine.connect() as conn:
        after = segment_figures(conn, rule, now=now) + segment_figures(conn, rule, now=now, key="app")
    assert [(f.value, f.baseline_value, f.p_value, f.sample_size, f.ci_low, f.ci_high) for f in after] == [
        (f.value, f.baseline_value, f.p_value, f.sample_size, f.ci_low, f.ci_high) for f in before]


def test_overall_and_segment_rules_decide_on_weighted_rates(engine, database_url):
    settings = make_settings(database_url, toxicity_rate_max=0.1, alert_segment_by="app", alert_min_samples=50)
    # app big: 1,000 traces, 100 judged (10%), 1 bad; app small: 100 traces, all judged, 30 bad
    add_results(engine, passed=99, not_passed=1, segment={"app": "big"})
    add_results(engine, passed=70, not_passed=30, segment={"app": "small"})
    _sample(engine, {"app": "big"}, 0.1)
    rule = _rule(settings, "toxicity_rate")
    with engine.connect() as conn:
        overall = segment_figures(conn, rule, now=_now(engine))[0]
    # unweighted that would be 31/200 = 15.5%, above the maximum; the night's rate is 40/1100
    assert overall.value == pytest.approx(40 / 1100)
    assert overall.sample_size == 200 and overall.estimate.traces == pytest.approx(1100)
    assert overall.ci_low < 40 / 1100 < overall.ci_high
    results = evaluate_rules(settings, engine=engine)
    states = {tuple(r.segment.items()): r.state for r in results if r.rule == "toxicity_rate"}
    assert states == {(): "ok", (("app", "big"),): "ok", (("app", "small"),): "firing"}


def test_a_weighted_regression_fires_for_the_sampled_segment(engine, database_url):
    settings = make_settings(database_url, toxicity_regression_min_increase=0.02, alert_segment_by="app",
                             alert_min_samples=50)
    # a 10%-sampled app whose failing rate went from 2% to 12%, judged 100 a night
    add_results(engine, passed=686, not_passed=14, segment={"app": "s"}, age=timedelta(days=3))
    add_results(engine, passed=88, not_passed=12, segment={"app": "s"})
    _sample(engine, {"app": "s"}, 0.1)
    results = evaluate_rules(settings, engine=engine)
    fired = {tuple(r.segment.items()) for r in results if r.rule == "toxicity_regression" and r.state == "firing"}
    assert (("app", "s"),) in fired
