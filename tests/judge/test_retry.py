"""The retry policy (judgeflow/judge/retry.py): read once from the settings, its worst case a product of
its three levels, and one loop per level, counted at the judge server over real HTTP, with the judge in
the run's process and in judge worker processes."""

from __future__ import annotations

import ast
import asyncio
from datetime import datetime, timezone
from pathlib import Path

import pytest

from judgeflow.config.settings import Settings
from judgeflow.errors import InvalidJudgeReplyError
from judgeflow.judge.config import JudgeConfig
from judgeflow.judge.factory import build_judge, judge_config
from judgeflow.judge.retry import CallRetry, RetryPolicy
from judgeflow.model import TraceWork
from judgeflow.run.policy import RunPolicy
from judgeflow.tasks.scoring import build_metrics, judge_pair
from tests.judge.test_litellm_judge import API_KEY, MODEL
from tests.support.judge_server import JudgeServer, error_reply, garbage_reply

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "judgeflow", ROOT / "metrics", ROOT / "tasks", ROOT / "flows"]
RETRY_SETTINGS = {"judge_max_retries", "judge_backoff_base_s", "judge_backoff_max_s", "task_retries",
                  "task_retry_delay_s", "judge_max_repairs"}


def test_the_policy_is_built_from_the_settings_by_one_function():
    settings = Settings(_env_file=None, judge_max_retries=3, judge_backoff_base_s=0.5, judge_backoff_max_s=7.0,
                        task_retries=1, task_retry_delay_s=3.0, judge_max_repairs=4)
    policy = RetryPolicy.from_settings(settings)
    assert policy == RetryPolicy(call=CallRetry(max_retries=3, backoff_base_s=0.5, backoff_max_s=7.0),
                                 pair_reruns=1, rerun_delay_s=3.0, repairs=4)
    assert policy.rerun_delays() == [3.0]
    assert JudgeConfig.from_settings(settings).retry == policy.call  # what the judge and its workers get
    # defaults unchanged: 5 attempts, reruns after 2 s and 4 s, 2 repairs
    default = RetryPolicy.from_settings(Settings(_env_file=None))
    assert (default.call.attempts, default.rerun_delays(), default.repairs) == (5, [2.0, 4.0], 2)

    readers = {}
    for folder in PRODUCT:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr in RETRY_SETTINGS:
                    readers.setdefault(str(path.relative_to(ROOT)), set()).add(node.attr)
    assert readers == {"judgeflow/judge/retry.py": RETRY_SETTINGS}


def test_the_worst_case_is_the_product_of_the_three_levels():
    assert RetryPolicy().worst_case_sends() == 5 * 3 * 3
    policy = RetryPolicy(call=CallRetry(max_retries=1), pair_reruns=0, repairs=3)
    assert policy.worst_case_sends() == 2 * 1 * 4


def _pair(metric: str = "hallucination") -> TraceWork:
    return TraceWork(trace_id="tr-1", metric=metric, created_at=datetime.now(timezone.utc), input="Where is it?",
                     output="It is in Paris.", context=["It is in Paris."])


def _judged(settings: Settings, work: TraceWork):
    """One pair through the pair level's loop, with the judge the settings build (started, then closed)."""
    judge = build_judge(judge_config(settings))
    judge.start()
    try:
        return asyncio.run(judge_pair(work, settings, build_metrics(settings, judge), judge=judge,
                                      gate=RunPolicy(settings, None).pair(work, None), flow_run_id=None))
    finally:
        judge.close()


@pytest.mark.parametrize("processes", [1, 2])
def test_a_429_storm_is_sent_attempts_per_call_times_runs_per_pair_and_no_more(processes):
    """One loop per level: with the adapter's attempts and the workers' hand-back folded into one loop, a
    rate-limited call is sent (max_retries + 1) x (task_retries + 1) times, in the run's process or not."""
    limited = error_reply(429, "slow down", headers={"Retry-After": "0"})
    with JudgeServer(lambda request: limited) as server:
        settings = Settings(_env_file=None, judge_model=MODEL, judge_api_base=server.url, judge_api_key=API_KEY,
                            judge_processes=processes, max_concurrency=2, judge_max_retries=2,
                            judge_backoff_base_s=0.01, judge_backoff_max_s=0.02, task_retries=1,
                            task_retry_delay_s=0.01)
        row, outcome = _judged(settings, _pair())
        assert server.calls() == 3 * 2
    assert outcome.status == "failed" and outcome.attempts == 2 and "gave up after 3 attempts" in row["error"]
    assert outcome.judge_calls == 0  # a 429 is refused before any work: not billed


def test_an_invalid_reply_is_repaired_repairs_times_and_then_fails_without_a_rerun():
    with JudgeServer(lambda request: garbage_reply()) as server:
        settings = Settings(_env_file=None, judge_model=MODEL, judge_api_base=server.url, judge_api_key=API_KEY,
                            judge_processes=1, judge_max_repairs=1, task_retries=2, task_retry_delay_s=0.01)
        row, outcome = _judged(settings, _pair())
        assert server.calls() == 1 + 1  # the first round and one repair; not transient: no rerun
    assert outcome.status == "failed" and outcome.attempts == 1 and outcome.judge_calls == 2
    assert row["error_kind"] == "invalid_reply" and row["error"].startswith(InvalidJudgeReplyError.__name__)
