"""A metric with segment keys of its own (a metrics file's segment_by): its rules
fire and resolve per value of its keys, in place of JUDGEFLOW_ALERT_SEGMENT_BY's,
which the other metrics' rules and the judge failure rate keep; `[]` is overall
only. The alert rows, events and notifications name the segment, and the
figures from the rollup equal those counted from the results alone."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from judgeflow.alerts import evaluate_rules
from judgeflow.run.metric_door import open_metrics
from tests.alerts.helpers import add_results, alert_events_rows, alert_row, make_settings
from tests.alerts.raw_figures import raw_figures

FILE = '''
[metrics.helpfulness]
criteria = "The reply helps the user."
evaluation_steps = ["Read what was asked.", "Decide whether the reply helps."]
rate_max = 0.10
segment_by = ["tier"]

[metrics.brief]
criteria = "The reply is brief."
evaluation_steps = ["Count the sentences."]
rate_max = 0.10
segment_by = []
'''


@pytest.fixture
def metrics_file(tmp_path):
    path = tmp_path / "metrics.toml"
    path.write_text(FILE, encoding="utf-8")
    open_metrics(path)  # as the entry point whose settings name it does
    yield path
    open_metrics(None)


def _by_rule(results, rule: str) -> list[tuple[dict, str, str | None]]:
    return [(r.segment, r.state, r.transition) for r in results if r.rule == rule]


def test_a_metrics_rules_fire_and_resolve_per_its_own_segment_keys(engine, database_url, hook, metrics_file):
    settings = make_settings(database_url, metrics_file=str(metrics_file), alert_webhook_url=hook.url,
                             toxicity_rate_max=0.1, failure_rate_max=0.5, alert_segment_by="app",
                             alert_min_samples=10)
    # the same results for each metric: what app b and tier free hold is 4 bad of 10 (40%); overall 4/70
    for metric in ("helpfulness", "brief", "toxicity"):
        add_results(engine, metric, passed=60, segment={"app": "a", "tier": "paid"})
        add_results(engine, metric, passed=6, not_passed=4, segment={"app": "b", "tier": "free"})
    results = evaluate_rules(settings, engine=engine)
    assert _by_rule(results, "helpfulness_rate") == [
        ({}, "ok", None), ({"tier": "paid"}, "ok", None), ({"tier": "free"}, "firing", "fired")]
    assert _by_rule(results, "toxicity_rate") == [
        ({}, "ok", None), ({"app": "a"}, "ok", None), ({"app": "b"}, "firing", "fired")]
    assert _by_rule(results, "brief_rate") == [({}, "ok", None)]  # segment_by = []: overall only
    assert [r.segment for r in results if r.rule == "judge_failure_rate"] == [{}, {"app": "a"}, {"app": "b"}]
    fired = sorted((p.json()["rule"], p.json()["notification"], p.json()["segment"]) for p in hook.requests)
    assert fired == [("helpfulness_rate", "fired", {"tier": "free"}), ("toxicity_rate", "fired", {"app": "b"})]
    [payload] = [p.json() for p in hook.requests if p.json()["rule"] == "helpfulness_rate"]
    assert (payload["violations"], payload["sample_size"]) == (4, 10)
    assert alert_row(engine, "helpfulness_rate", "tier=free").state == "firing"
    assert alert_row(engine, "helpfulness_rate", "app=b") is None
    assert alert_row(engine, "brief_rate", "app=b") is None and alert_row(engine, "toxicity_rate", "tier=free") is None
    _figures_from_the_rollup_are_the_results(engine, settings)

    add_results(engine, "helpfulness", passed=40, segment={"app": "b", "tier": "free"})  # 4/50 = 8%: under 9%
    results = evaluate_rules(settings, engine=engine)
    assert _by_rule(results, "helpfulness_rate")[-1] == ({"tier": "free"}, "ok", "resolved")
    assert ({"app": "b"}, "firing", None) in _by_rule(results, "toxicity_rate")  # its own results are unchanged
    assert [(p.json()["notification"], p.json()["segment"]) for p in hook.requests
            if p.json()["rule"] == "helpfulness_rate"] == [("fired", {"tier": "free"}), ("resolved", {"tier": "free"})]
    assert [(e.segment_key, e.kind) for e in alert_events_rows(engine, "helpfulness_rate")] == [
        ("tier=free", "fired"), ("tier=free", "resolved")]
    _figures_from_the_rollup_are_the_results(engine, settings)


def _figures_from_the_rollup_are_the_results(engine, settings) -> None:
    """Each rule's figures per its own keys, from the evaluation's one read of the rollup, equal those counted
    from the results alone; the rollup has one line per (key, value), never per combination."""
    from judgeflow.alerts.evaluation import read_evaluation_counts
    from judgeflow.alerts.rules import enabled_rules
    from judgeflow.db.rollup import differences

    rules = [r for r in enabled_rules(settings) if r.kind in ("not_passed_rate", "failure_rate")]
    with engine.connect() as conn:
        assert differences(conn) == []
        keys = {row.seg_key for row in conn.execute(sa.text("SELECT DISTINCT seg_key FROM judgeflow.result_rollup"))}
        assert keys == {"", "app", "tier"}
        now = conn.execute(sa.text("SELECT now()")).scalar_one()
        counts = read_evaluation_counts(conn, rules, now=now)
        def seen(figures) -> list[tuple]:
            return [(f.segment.label, f.sample_size, f.violations, f.failed, f.value) for f in figures]

        mine = {(r.name, key): seen(counts.figures(r, key=key)) for r in rules for key in (None, *r.segment_by)}
        assert mine == {(r.name, key): seen(raw_figures(conn, r, now=now, key=key))
                        for r in rules for key in (None, *r.segment_by)}
        assert len(mine[("helpfulness_rate", "tier")]) == 2 and mine[("toxicity_rate", "app")][0][1] > 0
