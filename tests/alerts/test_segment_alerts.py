"""Alerts per (rule, segment) at the evaluation level: the maximum rules get the
segment dimension too; each segment has its own lifecycle, outbox queue, Prefect
event resource and Slack text; firing segments stay evaluated outside the top N."""

from __future__ import annotations

from datetime import timedelta

from judgeflow.alerts import evaluate_rules
from judgeflow.alerts.notify import Notifier, event_resource, slack_message
from tests.alerts.helpers import add_results, alert_events_rows, alert_row, make_settings


def test_a_maximum_rule_fires_for_the_segment_that_crosses_it(engine, database_url, hook):
    settings = make_settings(
        database_url, alert_webhook_url=hook.url, toxicity_rate_max=0.1, alert_segment_by="app", alert_min_samples=10,
    )
    add_results(engine, passed=90, not_passed=2, segment={"app": "a"})
    bad_b = add_results(engine, passed=8, not_passed=4, segment={"app": "b"})  # 33%: above 10%; overall 6/104
    results = evaluate_rules(settings, engine=engine)
    tox = [(r.segment, r.state, r.transition) for r in results if r.rule == "toxicity_rate"]
    assert tox == [({}, "ok", None), ({"app": "a"}, "ok", None), ({"app": "b"}, "firing", "fired")]
    [payload] = [r.json() for r in hook.requests]
    assert payload["segment"] == {"app": "b"} and payload["rule"] == "toxicity_rate"
    assert (payload["violations"], payload["sample_size"], payload["rate"]) == (4, 12, round(4 / 12, 6))
    assert {w["trace_id"] for w in payload["worst_traces"]} == set(bad_b)
    assert alert_row(engine, "toxicity_rate").state == "ok"  # the overall row

    evaluate_rules(settings, engine=engine)  # nothing new
    assert len(hook.requests) == 1
    add_results(engine, passed=40, segment={"app": "b"})  # 4/52 = 7.7%: under the 9% hysteresis line
    evaluate_rules(settings, engine=engine)
    assert [(r.json()["notification"], r.json()["segment"]) for r in hook.requests] == [
        ("fired", {"app": "b"}), ("resolved", {"app": "b"}),
    ]
    assert [(e.segment_key, e.kind) for e in alert_events_rows(engine)] == [("app=b", "fired"), ("app=b", "resolved")]


def test_hysteresis_keeps_a_segment_firing_just_under_the_maximum(engine, database_url, hook):
    settings = make_settings(
        database_url, alert_webhook_url=hook.url, toxicity_rate_max=0.1, alert_segment_by="app", alert_min_samples=10,
    )
    add_results(engine, passed=8, not_passed=2, segment={"app": "b"})  # 20%
    evaluate_rules(settings, engine=engine)
    add_results(engine, passed=9, segment={"app": "b"})  # 2/21 = 9.5%: under 10%, above 9%
    results = evaluate_rules(settings, engine=engine)
    [b] = [r for r in results if r.segment == {"app": "b"} and r.rule == "toxicity_rate"]
    assert (b.state, b.transition) == ("firing", None)
    assert [r.json()["notification"] for r in hook.requests if r.json()["segment"] == {"app": "b"}] == ["fired"]


def test_a_firing_segment_is_still_evaluated_when_it_drops_out_of_the_top(engine, database_url, hook):
    settings = make_settings(
        database_url, alert_webhook_url=hook.url, toxicity_rate_max=0.1, alert_segment_by="app", alert_min_samples=10,
        alert_segment_top=1,
    )
    add_results(engine, passed=100, segment={"app": "big"})
    add_results(engine, passed=5, not_passed=5, segment={"app": "small"})
    add_results(engine, passed=10, segment={"app": "tiny"})
    first = [(r.segment, r.transition) for r in evaluate_rules(settings, engine=engine) if r.rule == "toxicity_rate"]
    # 'small' is folded into 'other' (5/20 = 25%): the group fires
    assert ({"app": "other"}, "fired") in first
    add_results(engine, passed=300, segment={"app": "tiny"})  # 'other' now 5/320: resolves
    second = [(r.segment, r.transition) for r in evaluate_rules(settings, engine=engine) if r.rule == "toxicity_rate"]
    assert ({"app": "other"}, "resolved") in second


def test_regression_notification_text_and_event_resource(engine, database_url):
    sent = []

    class Event:
        id = "evt"

    def emitter(**kwargs):
        sent.append(kwargs)
        return Event()

    settings = make_settings(
        database_url, toxicity_rate_max=None, toxicity_regression_min_increase=0.02, alert_segment_by="app",
        alert_min_samples=20, alert_prefect_events=True,
    )

    add_results(engine, passed=100, segment={"app": "b"}, age=timedelta(days=3))
    add_results(engine, passed=20, not_passed=10, segment={"app": "b"})
    evaluate_rules(settings, engine=engine, notifier=Notifier(settings, emitter=emitter, confirmer=lambda ids, _: set(ids)))
    # overall is app b alone here: it fires too; look at the segment's event
    [event] = [e for e in sent if e["payload"]["segment"]]
    payload = event["payload"]
    assert payload["kind"] == "regression" and payload["segment"] == {"app": "b"}
    assert (payload["baseline_violations"], payload["baseline_sample_size"]) == (0, 100)
    assert payload["p_value"] < 1e-6 and payload["min_increase"] == 0.02 and payload["alpha"] == 0.01
    assert event["resource"] == event_resource(payload) == {
        "prefect.resource.id": "judgeflow.rule.toxicity_regression.segment.app=b",
        "prefect.resource.name": "toxicity_regression [app=b]",
        "judgeflow.rule": "toxicity_regression",
        "judgeflow.state": "firing",
        "judgeflow.metric": "toxicity",
        "judgeflow.segment.app": "b",
    }
    text = slack_message(payload)["text"]
    assert "judgeflow alert firing: toxicity_regression for app=b" in text
    assert "33.3% over the last 24h (10/30) against 0.0% in the 7d before (0/100)" in text
    assert "Fisher" in text and "2.0%" in text


def test_cli_and_artifact_show_the_firing_segment(engine, database_url, monkeypatch, tmp_path, prefect_server):
    from typer.testing import CliRunner

    from judgeflow.cli.alerts import alerts_app
    from judgeflow.alerts.service import render_markdown

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREFECT_API_URL", prefect_server)
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", database_url)
    monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "10")
    monkeypatch.setenv("JUDGEFLOW_TOXICITY_RATE_MAX", "0.1")
    monkeypatch.setenv("JUDGEFLOW_ALERT_PREFECT_EVENTS", "false")
    add_results(engine, passed=90, segment={"app": "a"})
    add_results(engine, passed=8, not_passed=4, segment={"app": "b"})
    result = CliRunner().invoke(alerts_app, ["check"])
    assert result.exit_code == 0, result.output
    check_line = next(line for line in result.output.splitlines() if line.startswith("toxicity_rate [app=b]"))
    assert "FIRING" in check_line and "fired" in check_line
    listing = CliRunner().invoke(alerts_app, [])
    assert listing.exit_code == 0, listing.output
    segment_line = next(line for line in listing.output.splitlines() if line.startswith("toxicity_rate") and "app=b" in line
                        and "FIRING" in line)
    assert "33.3%" in segment_line
    assert any("toxicity_rate [app=b]" in line and "fired" in line for line in listing.output.splitlines())

    results = evaluate_rules(make_settings(database_url, toxicity_rate_max=0.1, alert_segment_by="app"), engine=engine)
    md = render_markdown(results)
    assert "| toxicity_rate | app=b | **FIRING** |" in md
    assert "app=a" not in md and "Segments evaluated and OK (not listed): toxicity_rate: 1" in md


def test_a_regression_is_judged_over_every_segment_tested_holm(engine, database_url, hook, monkeypatch, tmp_path):
    """Six apps and overall are tested in one evaluation: a rise significant on its own (p 0.004 <=
    alpha 0.01) does not page, a strong one does, and the notification says how p was adjusted."""
    settings = make_settings(
        database_url, alert_webhook_url=hook.url, toxicity_rate_max=None, toxicity_regression_min_increase=0.05,
        alert_segment_by="app", alert_min_samples=40,
    )
    for app in ("a", "b", "c", "d", "e", "f"):
        add_results(engine, passed=198, not_passed=2, segment={"app": app}, age=timedelta(days=3))
    add_results(engine, passed=45, not_passed=5, segment={"app": "b"})  # 1% -> 10%: p 0.004 on its own
    add_results(engine, passed=40, not_passed=20, segment={"app": "c"})  # 1% -> 33%: p ~ 1e-12
    for app in ("a", "d", "e", "f"):  # overall 25/510 against 1%: a rise under the 5 points
        add_results(engine, passed=100, segment={"app": app})
    results = {r.segment_label: r for r in evaluate_rules(settings, engine=engine) if r.rule == "toxicity_regression"}
    b, c = results["app=b"], results["app=c"]
    assert b.p_value <= 0.01 < b.p_adjusted and b.tests == 7  # uncorrected it would fire
    assert (b.state, b.transition) == ("ok", None)
    assert (c.state, c.transition) == ("firing", "fired") and c.p_adjusted <= 0.01
    assert "over 7 segments" in b.summary
    fired = [r.json() for r in hook.requests]
    assert [(p["segment"], p["notification"]) for p in fired] == [({"app": "c"}, "fired")]
    assert fired[0]["tests"] == 7 and fired[0]["p_value_adjusted"] >= fired[0]["p_value"]
    assert "Holm-adjusted over 7 segments" in slack_message(fired[0])["text"]

    # `judgeflow alerts check` shows both p-values of the segment that did not fire
    from typer.testing import CliRunner

    from judgeflow.cli.alerts import alerts_app

    monkeypatch.chdir(tmp_path)
    for name, value in (("DATABASE_URL", database_url), ("ALERT_SEGMENT_BY", "app"), ("ALERT_MIN_SAMPLES", "40"),
                        ("TOXICITY_REGRESSION_MIN_INCREASE", "0.05"), ("ALERT_PREFECT_EVENTS", "false")):
        monkeypatch.setenv(f"JUDGEFLOW_{name}", value)
    result = CliRunner().invoke(alerts_app, ["check"])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("toxicity_regression [app=b]"))
    assert f"{b.p_value:.4f} (Holm {b.p_adjusted:.4f})" in line and "OK" in line
