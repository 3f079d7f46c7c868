"""Per-segment figures: each value of each JUDGEFLOW_ALERT_SEGMENT_BY key gets
its window and baseline counts, the top N by volume have their own segment and
the rest are grouped as 'other'; and what a trace's metadata turns into."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from judgeflow.alerts.evaluation import OTHER, Segment, compute_figures, segment_figures
from judgeflow.alerts.rules import all_rules
from judgeflow.alerts.segments import segment_values
from judgeflow.alerts.stats import fisher_greater
from tests.alerts.helpers import add_results, make_settings

DAY = timedelta(days=1)


def _rule(database_url, name="toxicity_regression", **overrides):
    values = dict(alert_segment_by="app", toxicity_regression_min_increase=0.02, alert_window="24h")
    values.update(overrides)
    return {r.name: r for r in all_rules(make_settings(database_url, **values))}[name]


def _now(engine):
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.now())).scalar_one()


def test_each_segment_counts_its_window_and_baseline(engine, database_url):
    add_results(engine, passed=18, not_passed=2, segment={"app": "a"}, age=timedelta(hours=2))
    add_results(engine, passed=95, not_passed=5, segment={"app": "a"}, age=3 * DAY)
    add_results(engine, passed=5, not_passed=5, segment={"app": "b"}, age=timedelta(hours=2))
    add_results(engine, passed=40, segment={"app": "b"}, age=2 * DAY)
    add_results(engine, not_passed=7, segment={"app": "c"}, age=9 * DAY)  # before the baseline: ignored
    add_results(engine, passed=3, segment={}, age=timedelta(hours=2))  # no app: overall only
    rule = _rule(database_url)
    with engine.connect() as conn:
        now = _now(engine)
        overall = segment_figures(conn, rule, now=now)[0]
        per_app = {f.segment.value: f for f in segment_figures(conn, rule, now=now, key="app")}
    assert (overall.violations, overall.sample_size, overall.baseline_violations, overall.baseline_sample_size) == (
        7, 33, 5, 140,
    )
    assert overall.segment.as_json() == {}
    assert set(per_app) == {"a", "b"}
    b = per_app["b"]
    assert b.segment.as_json() == {"app": "b"} and b.segment.label == "app=b"
    assert (b.violations, b.sample_size, b.baseline_violations, b.baseline_sample_size) == (5, 10, 0, 40)
    assert b.value == 0.5 and b.baseline_value == 0.0 and b.increase == 0.5
    assert b.p_value == pytest.approx(fisher_greater(5, 10, 0, 40))
    a = per_app["a"]
    assert (a.violations, a.sample_size, a.baseline_violations, a.baseline_sample_size) == (2, 20, 5, 100)


def test_top_n_by_volume_the_rest_is_other_and_firing_segments_are_kept(engine, database_url):
    for app, n in {"big": 50, "mid": 30, "small1": 5, "small2": 4}.items():
        add_results(engine, passed=n - 1, not_passed=1, segment={"app": app})
    rule = _rule(database_url, alert_segment_top=2)
    with engine.connect() as conn:
        now = _now(engine)
        figs = {f.segment.value: f for f in segment_figures(conn, rule, now=now, key="app")}
        assert list(figs) == ["big", "mid", OTHER]
        other = figs[OTHER]
        assert other.segment.is_other and set(other.segment.named) == {"big", "mid"}
        assert (other.sample_size, other.violations) == (9, 2)
        # the worst traces of 'other' come from its members only
        worst = compute_figures(conn, rule, now=now, segment=other.segment).worst
        assert len(worst) == 2
        # a segment that is firing keeps its own row even outside the top N
        kept = {f.segment.value for f in segment_figures(conn, rule, now=now, key="app", keep=("small2",))}
        assert kept == {"big", "mid", "small2", OTHER}


def test_worst_traces_belong_to_the_segment(engine, database_url):
    bad_a = add_results(engine, not_passed=3, segment={"app": "a"}, scores=[0.7, 0.8, 0.9])
    add_results(engine, not_passed=3, segment={"app": "b"}, scores=[1.0, 1.0, 1.0])
    rule = _rule(database_url, name="toxicity_rate")
    with engine.connect() as conn:
        figures = compute_figures(conn, rule, segment=Segment("app", "a"))
    assert [w.trace_id for w in figures.worst] == [bad_a[2], bad_a[1], bad_a[0]]


@pytest.mark.parametrize(
    "metadata, expected",
    [
        ({"app": "shop", "model": "gpt", "x": 1}, {"app": "shop", "model": "gpt"}),
        ({"app": 3, "model": True}, {"app": "3", "model": "true"}),
        ({"app": {"nested": 1}, "model": None}, {}),
        ('{"app": "from-a-json-string"}', {"app": "from-a-json-string"}),
        ("not json", {}),
        (["app"], {}),
        (None, {}),
        ({"app": "nul\x00here " + "x" * 500}, {"app": ("nul\ufffdhere " + "x" * 500)[:200]}),
    ],
)
def test_segment_values_from_messy_metadata(metadata, expected):
    assert segment_values(metadata, ("app", "model")) == expected
