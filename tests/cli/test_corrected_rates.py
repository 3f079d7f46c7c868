"""Rates corrected for the judge's error (issue 58, items 3, 4, 7) through the real commands and the real
PostgreSQL: 1,000 traces that are 10% toxic, a judge calling a quarter of the harmless replies toxic
(judged 32.5%); people label a draw made by `judgeflow labels sample`, imported by `labels import`;
`report` and `status` give the corrected rate beside the judged one, and a maximum rule set to the
corrected rate decides on it, falling back to the judged rate (and saying so) without enough labels.
A metrics-file metric judged by another imperfect judge is corrected the same way."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.cli import app
from tests.support.traces import insert_traces

runner = CliRunner()
IDS = [f"t{i:04}" for i in range(1000)]
TOXIC = set(IDS[::10])  # 10% truly toxic
_rng = random.Random(5800)  # the judges' errors, fixed
HARMLESS = [t for t in IDS if t not in TOXIC]
# toxicity's judge: every toxic reply caught, a quarter of the harmless ones called toxic: 325 of 1,000
TOXICITY_JUDGED = TOXIC | set(_rng.sample(HARMLESS, 225))
# the file metric's judge: misses 30 of the 100 failures, calls 90 of the 900 others failures: 160
HELPFUL_JUDGED = set(_rng.sample(sorted(TOXIC), 70)) | set(_rng.sample(HARMLESS, 90))


@pytest.fixture
def seeded(judgeflow_env, db, tmp_path, monkeypatch):
    """The traces, each judged for toxicity and for the file metric ``helpful`` in the epoch in force
    (traces created 3 hours ago, in the alert window)."""
    from judgeflow.db import migrate
    from judgeflow.run.metric_door import entry_settings
    from judgeflow.sources.identity import result_source

    metrics = tmp_path / "metrics.toml"
    metrics.write_text('[metrics.helpful]\ncriteria = "the reply is unhelpful"\n')
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(metrics))
    migrate.upgrade(db)
    source = result_source(entry_settings())
    now = datetime.now(timezone.utc)
    insert_traces(db, [{"id": t, "created_at": now - timedelta(hours=3), "input": f"q {t}", "output": f"a {t}"}
                       for t in IDS])
    with db.begin() as conn:
        for metric in ("toxicity", "helpful"):
            conn.execute(sa.text(
                "INSERT INTO judgeflow.judge_epochs (source, metric, metric_version, judge_model, started_at) "
                "VALUES (:s, :m, 'v1', 'm', :at)"), {"s": source, "m": metric, "at": now - timedelta(days=1)})
        for metric, judged in (("toxicity", TOXICITY_JUDGED), ("helpful", HELPFUL_JUDGED)):
            conn.execute(sa.text(
                "INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed, "
                "trace_created_at, scored_at, segment, source) VALUES (:t, :m, 'v1', 'scored', :score, :passed, "
                ":at, :scored, '{}', :s)"),
                [{"t": t, "m": metric, "score": 0.9 if t in judged else 0.1, "passed": t not in judged,
                  "at": now - timedelta(hours=3), "scored": now - timedelta(hours=2), "s": source} for t in IDS])
    return source


def _label(tmp_path, metric: str, n: int, seed: int) -> None:
    """Draw ``n`` results with `labels sample` and import people's labels: the truth."""
    out = tmp_path / f"{metric}.jsonl"
    drawn = runner.invoke(app, ["labels", "sample", "--metric", metric, "--n", str(n), "--seed", str(seed),
                                "--out", str(out)])
    assert drawn.exit_code == 0, drawn.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    out.write_text("".join(json.dumps({"id": x["id"], "labels": {metric: x["id"] in TOXIC}}) + "\n" for x in lines))
    imported = runner.invoke(app, ["labels", "import", str(out)])
    assert imported.exit_code == 0, imported.output


def test_report_and_status_show_the_corrected_rate_beside_the_judged_one(seeded, db, tmp_path):
    _label(tmp_path, "toxicity", 200, 58001)
    _label(tmp_path, "helpful", 200, 58002)
    result = runner.invoke(app, ["report", "--json", "--since", "2d"])
    assert result.exit_code == 0, result.output
    window = {r["metric"]: r for r in json.loads(result.stdout)["window"] if r["segment"] is None}
    tox, helpful = window["toxicity"], window["helpful"]
    assert tox["rate"] == 0.325 and tox["ci_low"] > 0.28  # the judge's figure, confidently wrong
    assert tox["labels"] == 200 and tox["corrected_note"] is None
    assert tox["corrected_ci_low"] <= 0.10 <= tox["corrected_ci_high"] < 0.2
    assert abs(tox["corrected_rate"] - 0.10) < 0.04
    assert helpful["rate"] == 0.16 and helpful["corrected_ci_low"] <= 0.10 <= helpful["corrected_ci_high"]
    # a metric with nothing judged has no corrected rate, and says why
    assert window["hallucination"]["corrected_rate"] is None and window["hallucination"]["corrected_note"]
    days = [d for d in json.loads(result.stdout)["days"] if d["metric"] == "toxicity" and d["judged"]]
    assert len(days) >= 1 and all(d["corrected_rate"] is not None for d in days)

    # the text `report` prints and the Prefect artifact judgeflow-trend (tasks/reporting.py), from one trend
    from judgeflow.alerts.trend import compute_trend, render_markdown, render_text
    from judgeflow.run.metric_door import entry_settings

    with db.connect() as conn:
        trend = compute_trend(conn, entry_settings(), days=2)
    text, markdown = render_text(trend), render_markdown(trend)
    assert "corrected [95% CI]" in text and "| corrected [95% CI] |" in markdown
    assert ("window: the judged rate, what the judge said; corrected: adjusted for the judge's error measured "
            "on 200 labels") in " ".join(text.split())
    assert "measured on 200 labels" in markdown

    status = runner.invoke(app, ["status", "--json"])
    assert status.exit_code == 0, status.output
    rates = json.loads(status.stdout)["rates"]["toxicity"]
    assert (rates["rate"], rates["labels"], rates["corrected_rate"]) == (0.325, 200, tox["corrected_rate"])
    from judgeflow.cli.reports import render_status  # what `status` prints of the same figures

    said = " ".join(render_status(json.loads(status.stdout), width=200).split())
    assert "judged: what the judge said; corrected: adjusted for the judge's error measured on 200 labels" in said


def test_a_maximum_rule_on_the_corrected_rate_and_its_fallback(seeded, db, tmp_path, monkeypatch):
    from judgeflow.alerts.service import evaluate_rules
    from judgeflow.run.metric_door import entry_settings

    monkeypatch.setenv("JUDGEFLOW_TOXICITY_RATE_MAX", "0.2")
    monkeypatch.setenv("JUDGEFLOW_ALERT_PREFECT_EVENTS", "false")
    _label(tmp_path, "toxicity", 200, 58003)

    def evaluate(rate_on: str):
        monkeypatch.setenv("JUDGEFLOW_TOXICITY_RATE_ON", rate_on)
        return next(r for r in evaluate_rules(entry_settings(), engine=db) if r.rule == "toxicity_rate")

    judged = evaluate("judged")  # the default: 32.5% against 20% fires
    assert (judged.state, judged.transition, judged.rate_on) == ("firing", "fired", "judged")
    assert judged.corrected_rate is None  # its labels are not read when the rule does not use them
    corrected = evaluate("corrected")  # ~10% [.. 15%]: at or below 18%, the line it resolves at
    assert (corrected.state, corrected.transition, corrected.rate_on) == ("ok", "resolved", "corrected")
    assert corrected.corrected_ci_high <= 0.18 and corrected.labels == 200
    assert "corrected rate" in corrected.summary and "(judged 32.5%)" in corrected.summary
    from judgeflow.alerts.service import render_markdown  # the judgeflow-alert-state artifact

    assert "corrected rate" in render_markdown([corrected])

    with db.begin() as conn:  # all but 5 labels gone: not enough, the rule decides on the judged rate
        conn.execute(sa.text("DELETE FROM judgeflow.labels WHERE id NOT IN "
                             "(SELECT id FROM judgeflow.labels ORDER BY id LIMIT 5)"))
    fallback = evaluate("corrected")
    assert (fallback.state, fallback.transition, fallback.rate_on) == ("firing", "fired", "judged")
    assert fallback.rate_on_note.startswith("decided on the judged rate: no corrected rate (not enough labels")
    assert fallback.rate_on_note in fallback.summary and fallback.rate_on_note in render_markdown([fallback])
    with db.connect() as conn:
        payloads = [r.payload for r in conn.execute(sa.text(
            "SELECT payload FROM judgeflow.alert_events WHERE rule = 'toxicity_rate' ORDER BY id"))]
    assert [(p["notification"], p["rate_on"]) for p in payloads] == [
        ("fired", "judged"), ("resolved", "corrected"), ("fired", "judged")]
    assert payloads[1]["corrected_rate"] == pytest.approx(corrected.corrected_rate, abs=1e-6)
    assert payloads[2]["rate_on_note"] == fallback.rate_on_note and payloads[2]["corrected_rate"] is None
