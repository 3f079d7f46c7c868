"""`--metric` on the commands that judge: one parsing, one refusal, and a metric scored alone."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.cli import app
from judgeflow.cli.metric_option import chosen_metrics
from judgeflow.errors import MetricError
from tests.support.traces import BASE_TIME, insert_traces, scripted_trace

runner = CliRunner()


def test_values_are_split_on_commas_kept_in_order_and_named_once():
    assert chosen_metrics(None) is None and chosen_metrics([]) is None
    assert chosen_metrics(["hallucination, toxicity", "hallucination"]) == ["hallucination", "toxicity"]


def test_an_unknown_metric_names_the_registered_ones():
    with pytest.raises(MetricError, match=r"unknown metric 'helpful'; choose from toxicity, hallucination"):
        chosen_metrics(["toxicity", "helpful"])


@pytest.mark.parametrize("command", [
    ["score"], ["backfill", "--since", "7d", "--until", "0s"], ["calibrate", "--sample"], ["results"],
    ["shadow"],
])
def test_every_command_refuses_an_unknown_metric_in_one_line_with_its_page(judgeflow_env, command):
    result = runner.invoke(app, [*command, "--metric", "nope"])
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if "nope" in line]
    assert line == ("judgeflow: unknown metric 'nope'; choose from toxicity, hallucination "
                    "(see docs/metrics.md)")


def _by_metric(db) -> dict[str, int]:
    with db.connect() as conn:
        return dict(conn.execute(sa.text("SELECT metric, count(*) FROM judgeflow.eval_results GROUP BY metric")).all())


def test_scoring_one_metric_alone_judges_stores_and_pays_for_only_it(judgeflow_env, db, prefect_server,
                                                                     judge_server):
    # hallucination scored earlier for two of the four traces; toxicity is the metric added since
    insert_traces(db, [scripted_trace(i)[0] for i in range(4)])
    with db.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, trace_created_at) "
            "SELECT id, 'hallucination', 'scored', 0, true, created_at FROM public.llm_traces "
            "ORDER BY id LIMIT 2"))
        before = conn.execute(sa.text("SELECT trace_id, scored_at FROM judgeflow.eval_results")).all()
    result = runner.invoke(app, ["score", "--no-alerts", "--metric", "toxicity"])
    assert result.exit_code == 0, result.output
    assert _by_metric(db) == {"hallucination": 2, "toxicity": 4}  # the other two hallucination pairs wait
    assert judge_server.requests and "HallucinationJudgement" not in {r.step for r in judge_server.requests}
    with db.connect() as conn:
        kept = conn.execute(sa.text(
            "SELECT trace_id, scored_at FROM judgeflow.eval_results WHERE metric = 'hallucination'")).all()
    assert sorted(kept) == sorted(before)


def test_backfill_estimates_and_scores_only_the_metrics_given(judgeflow_env, db):
    insert_traces(db, [scripted_trace(i)[0] for i in range(5)])
    result = runner.invoke(app, ["backfill", "--since", BASE_TIME.isoformat(), "--until", "0s",
                                 "--metric", "toxicity"], input="n\n")
    assert result.exit_code == 1
    assert "5 traces to score (toxicity: 5)" in result.output


def test_calibrate_prices_only_the_labels_of_the_metrics_given(judgeflow_env):
    from judgeflow.calibration.labelled import SAMPLE_PATH, load_labelled, only_metrics

    items = load_labelled(SAMPLE_PATH)
    hallucination = only_metrics(items, ["hallucination"])
    assert hallucination and all(set(i.labels) == {"hallucination"} for i in hallucination)
    labels = sum("hallucination" in i.labels for i in items)
    result = runner.invoke(app, ["calibrate", "--sample", "--metric", "hallucination"], input="n\n")
    assert result.exit_code == 1, result.output
    assert f"{labels} (item, metric) pair(s) to judge" in result.output
