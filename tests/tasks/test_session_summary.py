"""The run's summary (and so its Prefect artifact) counts sessions apart from traces, and a session rate's
pass rate says it is per session."""

from __future__ import annotations

from judgeflow.metrics.registry import metric_names
from judgeflow.model import ScoreOutcome
from judgeflow.sources.session_id import session_result_id
from tasks.reporting import SummaryBuilder
from tasks.session_rates import SessionRates


def test_the_summary_counts_sessions_apart_from_traces_and_says_so():
    metric = metric_names()[0]
    sessions = [session_result_id("table:llm_traces@results-db", key) for key in ("a", "b")]
    builder = SummaryBuilder()
    builder.add([ScoreOutcome(trace_id=t, metric=metric, status="scored", passed=True, judge_calls=1)
                 for t in ("t1", "t2", "t3")])
    builder.add_session_rates(SessionRates(written=2, sessions=tuple(sessions),
                                           by_metric={f"{metric}_session": (2, 1)}))
    summary = builder.build(duration_s=1.0, flow_run_id=None, pending_at_start=3)
    assert (summary.traces, summary.sessions, summary.scored, summary.judge_calls) == (3, 2, 5, 3)
    assert summary.pass_rate[f"{metric}_session"] == 0.5
    figures = {row["figure"]: row["value"] for row in summary.table()}
    assert figures["traces"] == 3 and figures["sessions"] == 2
    assert figures[f"{metric}_session pass rate (sessions)"] == "50.0%" and f"{metric} pass rate" in figures
    assert "| sessions | 2 |" in summary.markdown()
