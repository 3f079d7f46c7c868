"""A session rate's own alert rule against the real database: one toxic turn in each of many
25-turn sessions keeps the per-trace toxicity rate under its maximum while every session fails
toxicity_session, so toxicity_session_rate (on by default) fires and toxicity_rate does not."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from judgeflow.alerts.service import evaluate_rules
from judgeflow.metrics.registry import registered
from judgeflow.sources.identity import result_source
from tasks.session_rates import store_rates
from tests.alerts.helpers import alert_row, make_settings
from tests.support.session_rows import seed_session

SESSIONS, TURNS = 12, 25


def test_a_toxic_turn_per_session_fires_the_session_rate_while_the_trace_rate_stays_under(engine, database_url):
    settings = make_settings(database_url)
    metric = next(name for name, spec in registered().items() if spec.settings().rate_max is not None)
    source = result_source(settings)
    start = datetime.now(timezone.utc) - timedelta(hours=2)
    with engine.begin() as conn:
        ids = [seed_session(conn, source, f"chat-{i}", start, {metric: [turn != i % TURNS for turn in range(TURNS)]})
               for i in range(SESSIONS)]
    assert store_rates(settings, ids).written == SESSIONS

    evaluations = {e.rule: e for e in evaluate_rules(settings, engine=engine) if not e.segment}
    trace_rule, session_rule = evaluations[f"{metric}_rate"], evaluations[f"{metric}_session_rate"]
    maximum = settings.metric(metric).rate_max
    assert trace_rule.value == 1 / TURNS < maximum and trace_rule.sample_size == SESSIONS * TURNS
    assert trace_rule.state == "ok" and alert_row(engine, f"{metric}_rate").state == "ok"
    assert session_rule.value == 1.0 and session_rule.sample_size == SESSIONS
    assert session_rule.state == "firing" and alert_row(engine, f"{metric}_session_rate").state == "firing"
