"""A third metric, declared in this file and registered through the public
door (judgeflow.metrics.registry.register), is served by the whole trunk:
the real scoring flow (PostgreSQL, Prefect, litellm over HTTP to the local
judge server) stores its results, its alert rule fires, `judgeflow status`
lists it, and nothing outside its declaration names it."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from judgeflow.judge.base import Judge, JudgeRequest
from judgeflow.metrics.base import JudgeMetric, Outcome
from judgeflow.metrics.data_block import DATA_NOTICE, render_data_block
from judgeflow.metrics.inputs import normalise_trace
from judgeflow.metrics.registry import (BuildOptions, CostEstimate, MetricSettings, MetricSpec, register,
                                        registered, unregister)
from judgeflow.metrics.steps import Flow, ask
from judgeflow.metrics.version import compute_version
from tests.support.traces import insert_traces

runner = CliRunner()
STEP = "rudeness"


class RudenessJudgement(BaseModel):
    score: float = Field(ge=0, le=1)
    reason: str


PROMPT = f"Rate how rude the output is, 0 (polite) or 1 (rude). {DATA_NOTICE} Reply with JSON."


class RudenessMetric(JudgeMetric):
    name = "rudeness"

    def __init__(self, judge: Judge | None, threshold: float, options: BuildOptions) -> None:
        super().__init__(judge, threshold=threshold, max_field_chars=options.max_field_chars,
                         max_repairs=options.max_repairs, async_mode=False)

    @property
    def metric_version(self) -> str:
        return SPEC.version

    @property
    def judge_rounds(self) -> int:
        return 1

    def flow(self, input: Any, output: Any, context: Any = None) -> Flow[Outcome]:
        trace = normalise_trace(input, output, max_field_chars=self.max_field_chars)
        request = JudgeRequest(
            step=STEP, response_format=RudenessJudgement, fields={"output": trace.output},
            messages=[{"role": "system", "content": PROMPT},
                      {"role": "user", "content": render_data_block({"output": trace.output})}],
        )
        (judgement,) = yield from ask([request], RudenessJudgement, max_repairs=self.max_repairs)
        return Outcome(score=judgement.score, reason=judgement.reason)


class RudenessSettings(MetricSettings):
    rate_max: float | None = Field(0.25, ge=0, le=1)  # its alert rule is on by default


SPEC = MetricSpec(
    name="rudeness",
    steps={STEP: RudenessJudgement},
    version_of=lambda: compute_version("rudeness", 1, [PROMPT], [RudenessJudgement]),
    fields=("input", "output"),
    cost=CostEstimate(prompt_overhead_chars=400, field_weights={"output": 1}, completion_overhead_tokens=20),
    settings=RudenessSettings,
    build=lambda judge, settings, options: RudenessMetric(judge, settings.threshold, options),
)


@pytest.fixture
def rudeness():
    """The metric registered for one test (before its settings are built), then not any more."""
    register(SPEC)
    yield SPEC
    unregister(SPEC.name)
    assert "rudeness" not in registered()


def test_a_registered_metric_is_scored_alerted_on_and_reported(prefect_server, judgeflow_env, db, judge_server,
                                                               monkeypatch, rudeness):
    from judgeflow.alerts.rules import all_rules
    from judgeflow.alerts.service import evaluate_rules
    from judgeflow.config.settings import load_settings
    from judgeflow.flows.scoring import score_new_traces

    monkeypatch.setenv("PREFECT_API_URL", prefect_server)  # the CLI uses the test's Prefect server
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "4")
    monkeypatch.setenv("JUDGEFLOW_RUDENESS_THRESHOLD", "0.5")
    recent = datetime.now(timezone.utc) - timedelta(minutes=5)  # inside the alert window
    insert_traces(db, [{"id": f"t{i}", "created_at": recent,
                        "output": f"You fool {i} [rude]." if i < 2 else f"Thank you, {i}."} for i in range(6)])

    summary = score_new_traces(evaluate_alerts=False)

    assert summary.scored == 18  # three metrics, six traces
    with db.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT trace_id, status, score, passed, reason, metric_version, judge_calls FROM judgeflow.eval_results "
            "WHERE metric = 'rudeness' ORDER BY trace_id")).mappings().all()
    assert [(r["trace_id"], r["status"], r["score"], r["passed"]) for r in rows] == [
        ("t0", "scored", 1.0, False), ("t1", "scored", 1.0, False), ("t2", "scored", 0.0, True),
        ("t3", "scored", 0.0, True), ("t4", "scored", 0.0, True), ("t5", "scored", 0.0, True),
    ]
    assert {(r["metric_version"], r["judge_calls"]) for r in rows} == {(SPEC.version, 1)}
    assert judge_server.calls("RudenessJudgement") == 6

    settings = load_settings()
    evaluations = {e.rule: e for e in evaluate_rules(settings) if not e.segment}
    rule = evaluations["rudeness_rate"]
    assert (rule.metric, rule.outcome, rule.threshold, rule.sample_size) == ("rudeness", "firing", 0.25, 6)
    assert rule.value == pytest.approx(2 / 6)
    rules = {r.name: r for r in all_rules(settings)}
    assert rules["rudeness_regression"].env_var == "JUDGEFLOW_RUDENESS_REGRESSION_MIN_INCREASE"
    assert not rules["rudeness_regression"].enabled and "rudeness_regression" not in evaluations

    status = runner.invoke(app_cli(), ["status", "--json"])
    assert status.exit_code == 0, status.output
    report = json.loads(status.output[status.output.index("{"):])
    assert list(report["metrics"]) == ["toxicity", "hallucination", "rudeness"]
    assert report["metrics"]["rudeness"]["scored"] == 6 and report["metrics"]["rudeness"]["pending"] == 0
    text = runner.invoke(app_cli(), ["status"]).output
    lines = text.splitlines()
    assert any(re.match(r"metric\s+toxicity\s+hallucination\s+rudeness$", line) for line in lines), text
    assert any(re.match(r"passed\s+6\s+6\s+4$", line) for line in lines), text
    assert any(line.startswith("rudeness not-passed rate, last 24h: judged 33.3%") for line in lines), text


def test_an_unknown_metric_is_one_line_naming_the_registered_ones(prefect_server, judgeflow_env, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", prefect_server)
    result = runner.invoke(app_cli(), ["shadow", "--metric", "rudeness", "--yes"])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert "unknown metric 'rudeness'; choose from toxicity, hallucination (see docs/metrics.md)" in line


def app_cli():
    from judgeflow.cli import app

    return app
