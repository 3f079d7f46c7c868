"""`judgeflow status`'s lines besides its table say what the database holds, and guess no cause."""

from __future__ import annotations

from judgeflow.status.notes import status_notes


def test_results_of_a_metric_no_setting_serves_name_no_variable_the_user_never_set():
    report = {"source": "table:public.llm_traces@results-db", "source_notes": [], "skipped_by_preset": {},
              "no_longer_scored": {"helpfulness": 24}}
    [line] = [line for line in status_notes(report) if line.startswith("helpfulness")]
    assert line == ("helpfulness: not scored now (no built-in, plugin or metrics file of these settings serves it); "
                    "its 24 stored result(s) are kept")
    assert "JUDGEFLOW_METRICS_FILE" not in line
