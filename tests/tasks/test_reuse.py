"""The content hash and the in-run coalescing of identical pairs (tasks/reuse.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from judgeflow.settings import Settings
from judgeflow.tasks.reuse import InFlight, content_hash, copied_row
from judgeflow.tasks.work import TraceWork

NOW = datetime(2026, 11, 23, tzinfo=timezone.utc)


def _work(**kw):
    base = dict(trace_id="t1", metric="hallucination", created_at=NOW, input="q", output="a", context=["c"])
    return TraceWork(**{**base, **kw})


def test_the_hash_covers_content_judge_and_version_but_not_the_trace_id():
    s = Settings(_env_file=None)
    h = content_hash(_work(), s, "v1")
    assert h == content_hash(_work(trace_id="t2", created_at=datetime(2020, 1, 1, tzinfo=timezone.utc)), s, "v1")
    different = [
        content_hash(_work(context=["d"]), s, "v1"),
        content_hash(_work(input="q2"), s, "v1"),
        content_hash(_work(output="b"), s, "v1"),
        content_hash(_work(metric="toxicity"), s, "v1"),
        content_hash(_work(), s, "v2"),
        content_hash(_work(), s.model_copy(update={"judge_model": "other"}), "v1"),
        content_hash(_work(), s.model_copy(update={"max_field_chars": 500}), "v1"),
    ]
    assert h not in different and len(set(different)) == len(different)
    assert content_hash(_work(output=None), s, "v1") is None


def test_followers_get_the_leaders_result_and_a_failed_leader_frees_the_slot():
    flights = InFlight()
    lead, future = flights.lead_or_follow("run", "h")
    follow, same = flights.lead_or_follow("run", "h")
    assert lead and not follow and same is future
    assert flights.lead_or_follow("other-run", "h")[0]  # scoped per run
    flights.settle("run", "h", future, None)
    assert future.result() is None
    lead_again, second = flights.lead_or_follow("run", "h")
    assert lead_again and second is not future
    flights.settle("run", "h", second, {"trace_id": "t1"})
    assert not flights.lead_or_follow("run", "h")[0]  # a settled result stays for late twins
    flights.forget("run")
    assert flights.lead_or_follow("run", "h")[0]


def test_a_copy_is_decided_by_the_current_threshold_and_costs_nothing():
    source = {"trace_id": "orig", "status": "scored", "score": 0.6, "reason": "r", "details": {"x": 1},
              "metric_version": "v", "judge_model": "m"}
    row = copied_row(_work(), source, threshold=0.7, flow_run_id="f", digest="h")
    assert row["passed"] is True and row["threshold"] == 0.7 and row["score"] == 0.6
    assert row["details"] == {"x": 1, "reused_from": "orig"} and source["details"] == {"x": 1}
    assert (row["judge_calls"], row["cost_usd"], row["prompt_tokens"]) == (0, 0.0, 0)


def test_a_copy_of_a_copy_names_the_trace_really_judged():
    original = {"trace_id": "orig", "status": "scored", "score": 0.6, "reason": "r", "details": {"x": 1},
                "metric_version": "v", "judge_model": "m"}
    first = copied_row(_work(trace_id="t2"), original, threshold=0.5, flow_run_id="f", digest="h")
    second = copied_row(_work(trace_id="t3"), first, threshold=0.5, flow_run_id="f", digest="h")
    assert first["details"]["reused_from"] == "orig"
    assert second["details"] == {"x": 1, "reused_from": "orig"}
