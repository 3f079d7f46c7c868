"""The start-judge task: the judge is ready before the first batch needs it."""

from __future__ import annotations

from judgeflow.run.entry import entered
from judgeflow.judge.pool.process_pool import JudgeProcessPool
from judgeflow.config.settings import Settings
from judgeflow.tasks.scoring import close_judge, start_judge


def test_start_judge_starts_the_judge_workers_without_calling_the_judge(judge_server):
    settings = Settings(judge_model="openai/judge-test", judge_api_base=judge_server.url, judge_api_key="k",
                        judge_processes=2, max_concurrency=4)
    pool = start_judge.fn(settings)
    try:
        assert isinstance(pool, JudgeProcessPool)
        assert pool.wait_ready()  # the second worker is forked by the first, after its litellm import
        assert all(pool.worker_pids()) and len(set(pool.worker_pids())) == 2
        assert judge_server.calls() == 0
    finally:
        close_judge(pool)
    assert pool.worker_pids() == [None, None]  # closed by the run that built it


def test_start_judge_uses_the_judge_its_entry_point_started(judge_server):
    from judgeflow.judge.factory import build_judge, judge_config

    settings = Settings(judge_model="openai/judge-test", judge_api_base=judge_server.url, judge_api_key="k",
                        judge_processes=2, max_concurrency=4)
    early = build_judge(judge_config(settings))
    early.start()
    try:
        with entered(settings, judge=early):
            assert start_judge.fn(settings) is early
            close_judge(early)  # the entry point owns it: the run leaves it open
            assert early.wait_ready()
        assert start_judge.fn(settings) is not early  # without the entry: a judge of its own
    finally:
        early.close()


def test_start_judge_never_fails_the_run():
    # a model litellm cannot route is refused when the judge is built, in-process
    assert start_judge.fn(Settings(_env_file=None, judge_model="openai/x", judge_processes=1,
                                   max_concurrency=1).model_copy(update={"judge_timeout_s": -1})) is None


def test_a_trace_its_source_skips_is_stored_skipped_with_the_reason_and_no_judge_call(judge_server):
    import asyncio
    from datetime import datetime, timezone

    from judgeflow.tasks.scoring import build_metrics, judge_pair
    from judgeflow.model import TraceWork
    from judgeflow.run.policy import RunPolicy

    settings = Settings(judge_model="openai/judge-test", judge_api_base=judge_server.url, judge_api_key="k",
                        judge_processes=1)
    from judgeflow.judge.factory import build_judge, judge_config

    judge = build_judge(judge_config(settings))
    metrics = build_metrics(settings, judge)
    for metric in ("toxicity", "hallucination"):
        work = TraceWork(trace_id="t1", metric=metric, created_at=datetime.now(timezone.utc), output=None,
                         skip_reason="a cache hit: judged there, once")
        gate = RunPolicy(settings, None).pair(work, None)
        row, outcome = asyncio.run(judge_pair(work, settings, metrics, judge=judge, gate=gate, flow_run_id=None))
        assert (row["status"], row["reason"], row["judge_calls"], row["error"]) == (
            "skipped", "a cache hit: judged there, once", 0, None)
        assert row["details"] == {"skipped_by_source": True}
        assert outcome.status == "skipped" and outcome.reason == "a cache hit: judged there, once"
    assert judge_server.stats()["requests"] == 0
