"""The content hash and the in-run coalescing of identical pairs (judgeflow/run/reuse.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from judgeflow.config.settings import Settings
from judgeflow.run.reuse import InFlight, content_hash, copied_row
from judgeflow.model import TraceWork

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
    flights.finish("run", "h", future, None)
    assert future.result() is None
    lead_again, second = flights.lead_or_follow("run", "h")
    assert lead_again and second is not future
    flights.finish("run", "h", second, {"trace_id": "t1"})
    assert not flights.lead_or_follow("run", "h")[0]  # a finished result stays for late twins
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


def test_every_setting_is_either_in_the_hash_or_declared_score_neutral():
    """A setting added to Settings must be classified: if it changes scores it
    goes in SCORE_SETTINGS (and so in the hash), else in the neutral list."""
    from judgeflow.run.reuse import SCORE_NEUTRAL_PREFIXES, SCORE_NEUTRAL_SETTINGS, SCORE_SETTINGS

    from judgeflow.metrics.registry import registered

    fields = set(Settings.model_fields)
    unclassified = {
        f for f in fields
        if f not in SCORE_SETTINGS and f not in SCORE_NEUTRAL_SETTINGS and not f.startswith(SCORE_NEUTRAL_PREFIXES)
    }
    assert not unclassified, f"classify these settings in judgeflow/run/reuse.py: {sorted(unclassified)}"
    assert not SCORE_SETTINGS & SCORE_NEUTRAL_SETTINGS
    assert SCORE_SETTINGS <= fields, "a score setting that no longer exists"
    # a metric's own: its score_fields are hashed; the rest (threshold, alert limits) decide passed or alert
    for spec in registered().values():
        assert set(spec.settings.score_fields) <= set(spec.settings.model_fields), spec.name
        assert not set(spec.settings.score_fields) & {"threshold", "rate_max", "regression_min_increase"}


def test_each_setting_that_changes_scores_changes_the_hash():
    from pydantic import SecretStr

    from judgeflow.run.reuse import SCORE_SETTINGS

    base = Settings(_env_file=None, judge_api_base="http://judge-a.internal/v1")
    tox = base.metric("toxicity")
    other = {
        "judge_model": "openai/other", "judge_api_base": SecretStr("http://judge-b.internal/v1"),
        "include_reason": not base.include_reason, "max_field_chars": base.max_field_chars + 1,
    }
    # a new score setting needs its case here; a session's budget: its own test below
    assert set(other) | {"session_max_chars"} == SCORE_SETTINGS
    own = {"toxicity_strict_mode": not tox.strict_mode, "max_opinions": tox.max_opinions + 1}
    assert {f"toxicity_{f}" if f != "max_opinions" else f for f in tox.score_fields} == set(own)
    neutral = {"toxicity_threshold": 0.9, "toxicity_rate_max": 0.5, "hallucination_threshold": 0.9}
    for metric in ("toxicity", "hallucination"):
        work = _work(metric=metric)
        h = content_hash(work, base, "v1")
        for name, value in other.items():
            assert content_hash(work, base.model_copy(update={name: value}), "v1") != h, name
        for name, value in own.items():  # toxicity's own settings do not touch a hallucination score
            changed = content_hash(work, Settings(_env_file=None, judge_api_base="http://judge-a.internal/v1",
                                                  **{name: value}), "v1")
            assert (changed != h) == (metric == "toxicity"), name
        for name, value in neutral.items():
            assert content_hash(work, Settings(_env_file=None, judge_api_base="http://judge-a.internal/v1",
                                               **{name: value}), "v1") == h, name


@pytest.mark.parametrize("metric", ["toxicity", "hallucination"])
def test_the_content_hash_keeps_the_layout_stored_hashes_were_made_with(metric):
    """Stored results are found by their hash: the key of each built-in metric
    is the one it had before metrics declared their own settings."""
    import hashlib
    import json

    s = Settings(_env_file=None, judge_api_base="http://judge-a.internal/v1")
    key = {
        "metric": metric, "metric_version": "v1", "judge_model": s.judge_model,
        "judge_api_base": hashlib.sha256(b"http://judge-a.internal/v1").hexdigest(),
        "strict": False if metric == "toxicity" else None, "max_opinions": 50 if metric == "toxicity" else None,
        "include_reason": True, "max_field_chars": 20_000, "input": "q", "output": "a", "context": ["c"],
    }
    encoded = json.dumps(key, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    assert content_hash(_work(metric=metric), s, "v1") == hashlib.sha256(encoded.encode()).hexdigest()


def test_the_judge_endpoint_is_hashed_by_its_real_value_never_held_in_clear():
    import hashlib
    import json

    a = Settings(_env_file=None, judge_api_base="http://user:pw@judge-a.internal/v1")
    b = Settings(_env_file=None, judge_api_base="http://user:pw@judge-b.internal/v1")
    # a SecretStr serialises as '**********' whatever its value: the two must still differ
    assert str(a.judge_api_base) == str(b.judge_api_base)
    assert content_hash(_work(), a, "v1") != content_hash(_work(), b, "v1")
    assert content_hash(_work(), a, "v1") == content_hash(_work(), a.model_copy(), "v1")
    key_of_a = {
        "metric": "hallucination", "metric_version": "v1", "judge_model": a.judge_model,
        "judge_api_base": "http://user:pw@judge-a.internal/v1", "strict": None, "max_opinions": None,
        "include_reason": a.include_reason, "max_field_chars": a.max_field_chars,
        "input": "q", "output": "a", "context": ["c"],
    }
    in_clear = hashlib.sha256(json.dumps(key_of_a, sort_keys=True, ensure_ascii=False,
                                         separators=(",", ":")).encode()).hexdigest()
    assert content_hash(_work(), a, "v1") != in_clear


CANNED = "Thanks for reaching out! Our team will get back to you within one business day. I think you will like it."


def test_two_endpoints_with_one_model_name_each_judge_identical_content_once(
    prefect_server, judgeflow_env, db, judge_server, monkeypatch
):
    from judgeflow.flows.scoring import score_new_traces
    from tests.support.judge_server import JudgeServer
    from tests.support.traces import insert_traces, results

    with JudgeServer() as second:
        for trace_id, server in (("a1", judge_server), ("b1", second), ("a2", judge_server), ("b2", second)):
            monkeypatch.setenv("JUDGEFLOW_JUDGE_API_BASE", server.url)
            insert_traces(db, [{"id": trace_id, "output": CANNED, "context": ["x"]}])
            judge_server.reset()
            second.reset()
            score_new_traces(evaluate_alerts=False, metrics=["hallucination"])
            judged = server.calls("HallucinationJudgement")
            # the first trace on each endpoint is judged there; the second copies that endpoint's score
            assert judged == (1 if trace_id.endswith("1") else 0), trace_id
            assert judge_server.calls() + second.calls() == judged
    stored = results(db)
    assert "reused_from" not in stored[("b1", "hallucination")]["details"]
    assert stored[("a2", "hallucination")]["details"]["reused_from"] == "a1"
    assert stored[("b2", "hallucination")]["details"]["reused_from"] == "b1"


def test_max_opinions_5_and_50_each_judge_identical_content_once(prefect_server, judgeflow_env, db, judge_server,
                                                                  monkeypatch):
    from judgeflow.flows.scoring import score_new_traces
    from tests.support.traces import insert_traces, results

    for trace_id, opinions in (("five-1", "5"), ("fifty-1", "50"), ("five-2", "5"), ("fifty-2", "50")):
        monkeypatch.setenv("JUDGEFLOW_MAX_OPINIONS", opinions)
        insert_traces(db, [{"id": trace_id, "output": CANNED}])
        judge_server.reset()
        score_new_traces(evaluate_alerts=False, metrics=["toxicity"])
        assert judge_server.calls("Opinions") == (1 if trace_id.endswith("1") else 0), trace_id
    stored = results(db)
    assert "reused_from" not in stored[("fifty-1", "toxicity")]["details"]
    assert stored[("five-2", "toxicity")]["details"]["reused_from"] == "five-1"
    assert stored[("fifty-2", "toxicity")]["details"]["reused_from"] == "fifty-1"


def test_the_conversation_budget_changes_a_session_s_hash_and_no_trace_s():
    base = Settings(_env_file=None)
    smaller = base.model_copy(update={"session_max_chars": base.session_max_chars // 2})
    trace = _work(metric="toxicity")
    session = trace.model_copy(update={"trace_id": "s:" + "0" * 40, "input": "", "output": "", "turns": 1,
                                       "context": [{"input": "hi", "output": "hello"}]})
    assert content_hash(trace, smaller, "v1") == content_hash(trace, base, "v1")
    assert content_hash(session, smaller, "v1") != content_hash(session, base, "v1")
