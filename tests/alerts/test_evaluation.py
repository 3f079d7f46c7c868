"""The rules' window reads: every rule reads the rollup once and the hours its
period boundaries cut from eval_results through its (metric,
trace_created_at) index, including the rule over all metrics."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from judgeflow.alerts.evaluation import compute_figures
from judgeflow.alerts.rules import all_rules
from tests.alerts.helpers import add_results, make_settings


def _window_query(engine: sa.Engine, rule):
    """The statement compute_figures counts the cut hours with (from eval_results),
    its parameters, and the figures; it also reads the rollup, once."""
    sent: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        sent.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", capture)
    try:
        with engine.connect() as conn:
            figures = compute_figures(conn, rule)
    finally:
        sa.event.remove(engine, "before_cursor_execute", capture)
    counting = [s for s in sent if "FROM judgeflow.eval_results" in s[0] and "count(*)" in s[0]]
    assert len(counting) == 1, sent
    assert len([s for s in sent if "FROM judgeflow.result_rollup" in s[0]]) == 1, sent
    return counting[0][0], counting[0][1], figures


@pytest.mark.parametrize("rule_name", ["toxicity_rate", "hallucination_rate", "judge_failure_rate"])
def test_each_rule_counts_its_window_through_the_metric_time_index(engine, database_url, rule_name):
    add_results(engine, "toxicity", passed=6, not_passed=2, failed=1)
    add_results(engine, "hallucination", passed=5, not_passed=1, failed=3)
    rule = {r.name: r for r in all_rules(make_settings(database_url))}[rule_name]

    statement, parameters, figures = _window_query(engine, rule)
    with engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")  # a tiny table: ask what the index allows
        plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + statement, parameters))

    assert "eval_results_metric_created_idx" in plan, plan
    index_cond = next(line for line in plan.splitlines() if "Index Cond" in line)
    # both columns bound the scan: not a walk over every metric's whole history
    assert "metric" in index_cond and "trace_created_at" in index_cond, plan

    expected = {  # (samples, bad)
        "toxicity_rate": (8, 2),
        "hallucination_rate": (6, 1),
        "judge_failure_rate": (18, 4),  # failed / (scored + failed), every metric
    }[rule_name]
    assert (figures.sample_size, figures.violations) == expected
