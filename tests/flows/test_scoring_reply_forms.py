"""The real scoring flow against a judge that writes its replies the way many
models do (prose around the JSON, two code fences, trailing commas, extra keys,
"no" verdicts without a reason): every pair is scored with the scripted score
on the first ask, and what the judge added is stored in the result's details."""

from __future__ import annotations

import pytest

from judgeflow.flows.scoring import score_new_traces
from tests.support.judge_server import reply_form_responder
from tests.support.traces import first_step_calls, insert_traces, results, scripted_trace


def test_replies_in_real_models_forms_are_scored_without_repair_calls(prefect_server, judgeflow_env, db, judge_server):
    judge_server.responder = reply_form_responder("all-at-once")
    rows, expected = zip(*(scripted_trace(i) for i in range(4)))
    insert_traces(db, rows)

    summary = score_new_traces(batch_size=4, max_concurrency=4, evaluate_alerts=False)

    assert summary.scored == 8 and summary.failed == 0
    assert all(len(request.messages) == 2 for request in judge_server.requests)  # no repair re-ask
    assert set(first_step_calls(judge_server).values()) == {1}
    stored = results(db)
    for row, want in zip(rows, expected):
        for metric in ("toxicity", "hallucination"):
            got = stored[(row["id"], metric)]
            assert got["status"] == "scored", got["error"]
            assert got["score"] == pytest.approx(want[metric]), (row["id"], metric)
            assert got["metric_version"].startswith(f"{metric}/3+")
    toxicity = stored[("tr-0000", "toxicity")]["details"]
    assert [(v["verdict"], v["reason"] is None, v["extra"]) for v in toxicity["verdicts"]] == [
        ("yes", False, {"category": "none"}), ("no", True, {"category": "none"}),
    ]
    assert {"step": "toxicity.opinions", "extra": {"confidence": 0.9}} in toxicity["reply_extras"]
    hallucination = stored[("tr-0000", "hallucination")]["details"]
    assert hallucination["reply_extras"] == [{"step": "hallucination", "extra": {"confidence": 0.9}}]
