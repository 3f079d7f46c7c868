"""A maximum rule over a sampled window pages on evidence (issue 46): it fires
only when the interval's lower bound is above the maximum; over the same
results judged in full it is today's point rule. Real PostgreSQL."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from judgeflow.alerts import evaluate_rules
from tests.alerts.helpers import add_results, alert_row, make_settings


def _sample(engine, segment: dict, prob: float) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                """
                INSERT INTO judgeflow.sample_decisions (trace_id, night, stratum, inclusion_prob, selected, created_at)
                SELECT trace_id, (trace_created_at AT TIME ZONE 'UTC')::date, 'app=' || (segment ->> 'app'), :p, true,
                       trace_created_at
                FROM judgeflow.eval_results WHERE segment @> CAST(:seg AS jsonb)
                """
            ),
            {"p": prob, "seg": json.dumps(segment)},
        )


def _states(results) -> dict:
    return {tuple(r.segment.items()): r for r in results if r.rule == "toxicity_rate"}


def test_a_sampled_rate_above_the_maximum_pages_only_when_its_interval_is(engine, database_url):
    settings = make_settings(database_url, toxicity_rate_max=0.05, alert_segment_by="app", alert_min_samples=50)
    # app big: 100 judged of 1,000 (10%), 7 bad: 7% estimated, but the interval reaches below 5%
    add_results(engine, passed=93, not_passed=7, segment={"app": "big"})
    _sample(engine, {"app": "big"}, 0.1)
    got = _states(evaluate_rules(settings, engine=engine))
    big = got[(("app", "big"),)]
    assert big.value == pytest.approx(0.07) and big.ci_low < 0.05 < big.ci_high
    assert big.state == "ok" and big.outcome == "ok"
    assert big.traffic == pytest.approx(1000) and big.effective_n == pytest.approx(100)
    row = alert_row(engine, segment_key="app=big")
    assert row.ci_low == pytest.approx(big.ci_low) and row.ci_high == pytest.approx(big.ci_high)
    assert row.traffic == pytest.approx(1000) and row.effective_n == pytest.approx(100)


def test_the_same_results_judged_in_full_page_on_the_point_as_today(engine, database_url):
    settings = make_settings(database_url, toxicity_rate_max=0.05, alert_segment_by="app", alert_min_samples=50)
    add_results(engine, passed=93, not_passed=7, segment={"app": "big"})
    got = _states(evaluate_rules(settings, engine=engine))
    big = got[(("app", "big"),)]
    assert big.value == pytest.approx(0.07) and big.ci_low < 0.05  # the interval is shown, not decided on
    assert big.state == "firing" and big.transition == "fired"


def test_clear_evidence_in_a_sampled_window_pages_with_the_interval_in_its_payload(engine, database_url):
    settings = make_settings(database_url, toxicity_rate_max=0.05, alert_segment_by="app", alert_min_samples=50)
    add_results(engine, passed=80, not_passed=20, segment={"app": "big"})  # 20% of 100 judged of 1,000
    _sample(engine, {"app": "big"}, 0.1)
    got = _states(evaluate_rules(settings, engine=engine))
    big = got[(("app", "big"),)]
    assert big.ci_low > 0.05 and big.state == "firing" and big.transition == "fired"
    with engine.connect() as conn:
        payload = conn.execute(sa.text(
            "SELECT payload FROM judgeflow.alert_events WHERE segment @> CAST(:s AS jsonb)"), {"s": '{"app": "big"}'}
        ).scalar_one()
    assert payload["sampled"] is True and payload["judged"] == 100 and payload["traffic"] == 1000
    assert payload["ci_low"] == pytest.approx(big.ci_low, abs=1e-6) and payload["effective_n"] == 100.0
