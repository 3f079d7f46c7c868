"""Builds the judge a run uses from settings.

``offline`` / ``offline/...`` selects the key-less offline judge; anything else
is a litellm model string. LiteLLM judges are cached per process so that every
caller with the same configuration shares one instance, and therefore one
bound on calls in flight (``max_concurrency``). With ``judge_processes`` > 1
the judge is a :class:`~judgeflow.judge.process_pool.JudgeProcessPool` whose
workers each hold a litellm judge. The judge modules are imported lazily: an
offline run never imports litellm.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from judgeflow.judge.base import Judge

if TYPE_CHECKING:
    from judgeflow.settings import Settings

_cache: dict[tuple, Judge] = {}
_lock = threading.Lock()


def is_offline_model(model: str) -> bool:
    return model == "offline" or model.startswith("offline/")


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
        int(settings.judge_processes),
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
            if settings.judge_processes > 1:
                from judgeflow.judge.process_pool import JudgeProcessPool

                judge = JudgeProcessPool(settings)
            else:
                from judgeflow.judge.litellm_judge import LiteLLMJudge

                judge = LiteLLMJudge.from_settings(settings)
            _cache[key] = judge
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
