"""Builds a judge from its :class:`~judgeflow.judge.config.JudgeConfig`.

Two separate choices:

* :func:`model_judge` chooses the model's adapter: ``offline`` /
  ``offline/...`` is the key-less offline judge, anything else a litellm
  model string (:class:`~judgeflow.judge.litellm_judge.LiteLLMJudge`).
* :func:`build_judge` chooses the process layout: with more than one judge
  process (``config.processes``) a
  :class:`~judgeflow.judge.pool.process_pool.JudgeProcessPool` whose workers each
  hold the model's judge for their share of the bound, else the model's
  judge in this process.

Each call builds a new judge: whoever builds one owns it, starts it
(``start()``: its worker processes, without waiting for them) and closes it
(``close()``); a run builds its judge once and hands it down. The judge
modules are imported lazily: an offline run never imports litellm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from judgeflow.judge.base import Judge
from judgeflow.judge.config import JudgeConfig, is_offline_model, judge_process_count

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings

__all__ = ["batch_api", "build_judge", "is_offline_model", "judge_config", "judge_process_count", "model_judge"]


def judge_config(settings: "Settings") -> JudgeConfig:
    return JudgeConfig.from_settings(settings)


def model_judge(config: JudgeConfig) -> Judge:
    """The judge for ``config.model`` in this process."""
    if config.offline:
        from judgeflow.judge.offline import OfflineJudge

        return OfflineJudge(answers=config.offline_answers, steps=config.metric_steps)
    from judgeflow.judge.litellm_judge import LiteLLMJudge

    return LiteLLMJudge.from_config(config)


def build_judge(config: JudgeConfig) -> Judge:
    """The judge a run uses: its worker processes' pool, or the model's judge in this process."""
    if config.processes > 1 and not config.offline:
        from judgeflow.judge.pool.process_pool import JudgeProcessPool

        return JudgeProcessPool(config)
    return model_judge(config)


def batch_api(config: JudgeConfig, **limits: int):
    """The adapter's batch calls for ``config.model`` (judgeflow/judge/batches.py's ``BatchApi``),
    within the file ``limits`` given (``max_lines``, ``max_bytes``; unset: OpenAI's); a model
    litellm cannot batch, or the offline judge, is refused with one line (ConfigError)."""
    from judgeflow.errors import ConfigError

    if config.offline:
        raise ConfigError("batches do not apply to the offline judge (it sends nothing to a provider): "
                          "unset JUDGEFLOW_JUDGE_BATCH or leave out --batch")
    from judgeflow.judge.litellm_batches import LiteLLMBatches

    api = LiteLLMBatches(config, **limits)
    refusal = api.can_batch(config.model) or next(filter(None, map(api.can_batch, config.metric_models)), None)
    if refusal is not None:
        raise ConfigError(f"--batch / JUDGEFLOW_JUDGE_BATCH refused: {refusal}")
    return api
