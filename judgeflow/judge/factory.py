"""Builds the judge a run uses from settings.

``offline`` / ``offline/...`` selects the key-less offline judge; anything else
is a litellm model string. LiteLLM judges are cached per process so that every
caller with the same configuration shares one instance, and therefore one
bound on calls in flight (``max_concurrency``). With more than one judge
process (:func:`judge_process_count`: ``JUDGEFLOW_JUDGE_PROCESSES``, unset: one
per core, at most 4) the judge is a
:class:`~judgeflow.judge.process_pool.JudgeProcessPool` whose workers each hold
a litellm judge, and the run's own process never imports litellm. The judge
modules are imported lazily: an offline run never imports litellm.
"""

from __future__ import annotations

import math
import os
import threading
from typing import TYPE_CHECKING

from judgeflow.judge.base import Judge

if TYPE_CHECKING:
    from judgeflow.settings import Settings

_cache: dict[tuple, Judge] = {}
_lock = threading.Lock()


# More workers than this buy nothing at the concurrency one run allows, and
# each costs memory (docs/benchmark.md).
MAX_DEFAULT_JUDGE_PROCESSES = 4


def is_offline_model(model: str) -> bool:
    return model == "offline" or model.startswith("offline/")


CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"


def cpu_quota_cores(path: str = CGROUP_CPU_MAX) -> int | None:
    """Cores' worth of CPU time a cgroup v2 quota allows ("200000 100000" -> 2),
    or None without one. Kubernetes' CPU limits and `docker run --cpus` set it
    while every core of the host stays visible."""
    try:
        with open(path) as handle:
            quota, period = handle.read().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    try:
        cores = len(os.sched_getaffinity(0))  # what this process may run on (taskset, cpusets)
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = cpu_quota_cores()
    return min(cores, quota) if quota else cores


def judge_process_count(settings: "Settings") -> int:
    """How many processes make a run's litellm judge calls: the setting, else one
    per core up to :data:`MAX_DEFAULT_JUDGE_PROCESSES`. 1 keeps the calls in the
    run's process. Why more than one by default: litellm's CPU per call runs on
    one core per process, and a 200 ms judge with 64 calls in flight (320 calls/s)
    needs more than a core of litellm alone (docs/benchmark.md)."""
    if settings.judge_processes is not None:
        return settings.judge_processes
    return max(1, min(MAX_DEFAULT_JUDGE_PROCESSES, usable_cores()))


def _key(settings: "Settings") -> tuple:
    api_key = settings.judge_api_key.get_secret_value() if settings.judge_api_key is not None else None
    return (
        settings.judge_model,
        settings.judge_api_base.get_secret_value() if settings.judge_api_base is not None else None,
        api_key,
        float(settings.judge_timeout_s),
        int(settings.judge_max_retries),
        float(settings.judge_backoff_base_s),
        float(settings.judge_backoff_max_s),
        int(settings.max_concurrency),
        judge_process_count(settings),
        settings.judge_input_cost_per_mtok,
        settings.judge_output_cost_per_mtok,
    )


def build_judge(settings: "Settings") -> Judge:
    """The judge for ``settings.judge_model`` (cached per process for litellm models)."""
    if is_offline_model(settings.judge_model):
        from judgeflow.judge.offline import OfflineJudge

        return OfflineJudge()

    key = _key(settings)
    with _lock:
        judge = _cache.get(key)
        if judge is None:
            processes = judge_process_count(settings)
            if processes > 1:
                from judgeflow.judge.process_pool import JudgeProcessPool

                judge = JudgeProcessPool(settings, processes)
            else:
                from judgeflow.judge.litellm_judge import LiteLLMJudge

                judge = LiteLLMJudge.from_settings(settings)
            _cache[key] = judge
        return judge


def build_started_judge(settings: "Settings") -> Judge:
    """The run's judge, built now, with its worker processes (if any) started:
    litellm's import (seconds of CPU) then overlaps whatever the caller does
    next (the CLI imports Prefect and creates the flow run meanwhile). Does not
    wait for them."""
    judge = build_judge(settings)
    start = getattr(judge, "start", None)
    if start is not None:
        start()
    return judge


def clear_judge_cache() -> None:
    """Forget cached judges, stopping any judge worker processes (tests)."""
    with _lock:
        judges = list(_cache.values())
        _cache.clear()
    for judge in judges:
        close = getattr(judge, "close", None)
        if close is not None:
            close()
