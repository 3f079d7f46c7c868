"""The demo's report (judgeflow/demo/report.py) on real PostgreSQL rows."""

from __future__ import annotations

import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.demo.report import build_report
from judgeflow.run.metric_door import entry_settings, open_metrics
from tests.support.traces import insert_traces, scripted_trace

HELPFULNESS = '''
[metrics.helpfulness]
criteria = "The reply helps the user with what they asked instead of refusing."
evaluation_steps = ["Read what the user asked.", "Decide whether the reply helps."]
inputs = ["input", "output"]
threshold = 0.5
'''


def test_the_five_worst_traces_are_the_worst_whichever_way_a_metric_scores(judgeflow_env, db, tmp_path,
                                                                          monkeypatch):
    path = tmp_path / "metrics.toml"
    path.write_text(HELPFULNESS, encoding="utf-8")
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(path))
    insert_traces(db, [scripted_trace(i)[0] for i in range(4)])
    migrate.upgrade(db)
    try:
        settings = entry_settings()  # as a command builds its settings: the file's metrics served with them
        with db.begin() as conn:
            # helpfulness is better higher: its worst failure is its lowest score; toxicity the other way
            conn.execute(sa.text(
                "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed) VALUES "
                "('tr-0000', 'helpfulness', 'scored', 0.4, false), ('tr-0001', 'helpfulness', 'scored', 0.0, false), "
                "('tr-0002', 'toxicity', 'scored', 0.6, false), ('tr-0003', 'helpfulness', 'scored', 0.9, true)"))
        worst = [(row["trace_id"], row["metric"]) for row in build_report(settings).worst]
    finally:
        open_metrics(None)
    assert worst == [("tr-0001", "helpfulness"), ("tr-0002", "toxicity"), ("tr-0000", "helpfulness")]


def test_the_summary_says_a_regression_rules_minimum_rise_and_a_held_rule():
    """A regression rule's limit is its minimum rise, not a maximum; a rate rule firing at or below its
    maximum says hysteresis holds it, and until where."""
    from judgeflow.demo.report import DemoReport, render

    alerts = [
        {"rule": "toxicity_rate", "state": "firing", "value": 0.049, "threshold": 0.05, "sample_size": 82},
        {"rule": "toxicity_regression", "state": "ok", "value": 0.049, "threshold": 0.02, "sample_size": 82},
        {"rule": "hallucination_rate", "state": "firing", "value": 0.4, "threshold": 0.1, "sample_size": 50},
    ]
    text = render(DemoReport(alerts=alerts, hysteresis=0.1), judge_note="offline", ui_url=None, flow_run_id=None,
                  ran_s=1.0)
    lines = {line.split(":")[0]: line for line in text.splitlines() if line.startswith("alert ")}
    assert lines["alert toxicity_rate"].endswith(
        "(rate 4.9% over 82 traces in the window, maximum 5.0%, held by hysteresis until at or below 4.5%)")
    assert lines["alert toxicity_regression"].endswith("minimum rise +2.0% over its baseline)")
    assert "maximum" not in lines["alert toxicity_regression"]
    assert lines["alert hallucination_rate"].endswith("maximum 10.0%)")  # above its maximum: plainly firing
