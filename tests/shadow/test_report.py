"""The shadow report's rendering of kappa where a judge's marginal is degenerate."""

from __future__ import annotations

from judgeflow.shadow.report import ShadowReport, metric_figures


def _row(i: int, current_passed: bool, passed: bool) -> dict:
    row = {"trace_id": f"t{i}", "stratum": "", "status": "scored", "current_status": "scored",
           "passed": passed, "current_passed": current_passed,
           "score": 0.0 if passed else 1.0, "current_score": 0.0 if current_passed else 1.0,
           "reason": "r", "current_reason": "r", "judge_model": "b", "metric_version": "v",
           "current_judge_model": "a", "current_metric_version": "v"}
    for prefix in ("", "current_"):
        row.update({f"{prefix}judge_calls": 2, f"{prefix}prompt_tokens": 10, f"{prefix}completion_tokens": 2,
                    f"{prefix}cost_usd": None})
    return row


def test_a_judge_that_never_fails_gets_undefined_kappa_not_an_interval():
    rows = [_row(i, True, i % 5 != 0) for i in range(50)]  # the current judge passes everything
    m = metric_figures("toxicity", rows)
    assert (m.kappa, m.kappa_ci, m.kappa_undefined) == (None, None,
                                                        "undefined: one judge never fails (the current judge)")
    report = ShadowReport(shadow_run_id="s", candidate_model="b", segment_by=None, per_segment=50, metrics=[m])
    line = next(x for x in report.render_text().splitlines() if x.startswith("Cohen's kappa"))
    assert line.split(None, 3)[3] == "undefined: one judge never fails (the current judge)"
    assert "| Cohen's kappa (pass/fail) | undefined: one judge never fails" in report.render_markdown()
    assert report.model_dump()["metrics"][0]["kappa_undefined"].startswith("undefined: one judge never fails")
