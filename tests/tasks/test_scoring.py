"""The start-judge task: the judge is ready before the first batch needs it."""

from __future__ import annotations

from judgeflow.judge.factory import build_judge, clear_judge_cache
from judgeflow.judge.process_pool import JudgeProcessPool
from judgeflow.settings import Settings
from judgeflow.tasks.scoring import start_judge


def test_start_judge_starts_the_judge_workers_without_calling_the_judge(judge_server):
    settings = Settings(judge_model="openai/judge-test", judge_api_base=judge_server.url, judge_api_key="k",
                        judge_processes=2, max_concurrency=4)
    clear_judge_cache()
    try:
        described = start_judge.fn(settings)
        pool = build_judge(settings)
        assert isinstance(pool, JudgeProcessPool) and described == repr(pool)
        assert pool.wait_ready()  # the second worker is forked by the first, after its litellm import
        assert all(pool.worker_pids()) and len(set(pool.worker_pids())) == 2
        assert judge_server.calls() == 0
    finally:
        clear_judge_cache()


def test_start_judge_never_fails_the_run(monkeypatch):
    import judgeflow.tasks.scoring as scoring

    def broken(settings):
        raise RuntimeError("cannot build")

    monkeypatch.setattr(scoring, "build_started_judge", broken)
    assert start_judge.fn(Settings(judge_model="openai/x")) == "not started"


def test_a_trace_its_source_skips_is_stored_skipped_with_the_reason_and_no_judge_call(judge_server):
    import asyncio
    from datetime import datetime, timezone

    from judgeflow.tasks.scoring import build_metrics, judge_pair
    from judgeflow.tasks.work import TraceWork

    settings = Settings(judge_model="openai/judge-test", judge_api_base=judge_server.url, judge_api_key="k",
                        judge_processes=1)
    metrics = build_metrics(settings)
    for metric in ("toxicity", "hallucination"):
        work = TraceWork(trace_id="t1", metric=metric, created_at=datetime.now(timezone.utc), output=None,
                         skip_reason="a cache hit: judged there, once")
        row, outcome = asyncio.run(judge_pair(work, settings, metrics, flow_run_id=None, retry_delays=[]))
        assert (row["status"], row["reason"], row["judge_calls"], row["error"]) == (
            "skipped", "a cache hit: judged there, once", 0, None)
        assert row["details"] == {"skipped_by_source": True}
        assert outcome.status == "skipped" and outcome.reason == "a cache hit: judged there, once"
    assert judge_server.stats()["requests"] == 0
