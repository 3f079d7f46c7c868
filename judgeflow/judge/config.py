"""What a judge needs to know, and nothing more: the model, where it is, the
judge's own key, its timeouts, attempts per call, bound on calls in flight and prices.

Built once from the settings (:meth:`JudgeConfig.from_settings`) and handed to
the judge, and to each judge worker process (pickled): a worker never receives
the whole :class:`~judgeflow.config.settings.Settings` with every other secret in it.
Imports nothing of litellm, prefect or sqlalchemy.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from judgeflow.config.judge_models import is_offline_model, metric_models
from judgeflow.judge.base import queue_ahead_for
from judgeflow.judge.retry import CallRetry, RetryPolicy

if TYPE_CHECKING:
    from collections.abc import Iterable

    from judgeflow.config.metric_catalogue import CataloguedMetric
    from judgeflow.config.settings import Settings

__all__ = ["JudgeConfig", "is_offline_model", "judge_process_count", "offline_answers_of"]

# More workers than this buy nothing at the concurrency one run allows, and
# each costs memory (docs/benchmark.md).
MAX_DEFAULT_JUDGE_PROCESSES = 4
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"


def offline_answers_of(specs: "Iterable[CataloguedMetric]") -> tuple[dict[str, str], frozenset[str]]:
    """What the offline judge answers, as the metrics ``specs`` declare it: step ->
    ``"module:function"``, and every step a metric has (one without an answer abstains)."""
    specs = list(specs)
    return ({step: target for spec in specs for step, target in spec.offline.items()},
            frozenset(step for spec in specs for step in spec.steps))


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
    run's process. More than one by default because litellm's CPU per call runs
    on one core per process (docs/benchmark.md)."""
    if settings.judge_processes is not None:
        return settings.judge_processes
    return max(1, min(MAX_DEFAULT_JUDGE_PROCESSES, usable_cores()))


@dataclass(frozen=True)
class JudgeConfig:
    model: str
    api_base: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    retry: CallRetry = CallRetry()  # attempts per call: the retry policy's (judgeflow/judge/retry.py)
    max_concurrency: int = 8
    # USD per million (prompt, completion) tokens; None: litellm's price map
    prices_per_mtok: tuple[float, float] | None = None
    # USD per million cached prompt tokens with ``prices_per_mtok``; None: the prompt price
    cached_price_per_mtok: float | None = None
    processes: int = 1
    # the models metrics ask instead of ``model`` (their own judge model): each priced from litellm's map,
    # never at ``prices_per_mtok``, which are ``model``'s
    metric_models: tuple[str, ...] = ()
    # a batch call's price as a fraction of the online one, where litellm's map has no batch prices
    batch_discount: float = 0.5
    # the offline judge's answers (step -> "module:function") and every step a metric has: the metrics'
    # declarations, handed to the judge as data
    offline_answers: tuple[tuple[str, str], ...] = ()
    metric_steps: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: "Settings") -> "JudgeConfig":
        prices = (settings.judge_input_cost_per_mtok, settings.judge_output_cost_per_mtok)
        offline = is_offline_model(settings.judge_model)
        answers, steps = offline_answers_of(settings.metric_specs().values()) if offline else ({}, frozenset())
        return cls(
            model=settings.judge_model,
            api_base=settings.judge_api_base.get_secret_value() if settings.judge_api_base is not None else None,
            api_key=settings.judge_api_key.get_secret_value() if settings.judge_api_key is not None else None,
            timeout_s=float(settings.judge_timeout_s),
            retry=RetryPolicy.from_settings(settings).call,
            max_concurrency=int(settings.max_concurrency),
            prices_per_mtok=None if None in prices else (float(prices[0]), float(prices[1])),
            cached_price_per_mtok=settings.judge_cached_input_cost_per_mtok,
            processes=judge_process_count(settings),
            metric_models=metric_models(settings),
            batch_discount=float(settings.judge_batch_discount),
            offline_answers=tuple(answers.items()),
            metric_steps=steps,
        )

    @property
    def offline(self) -> bool:
        return is_offline_model(self.model)

    def secrets(self) -> list[str]:
        """The values error texts and logs must never show."""
        return [v for v in (self.api_key, self.api_base) if v]

    def shares(self) -> list["JudgeConfig"]:
        """The configuration of each judge worker: the run's ``max_concurrency``
        split over ``processes`` workers (6 over 4: 2, 2, 1, 1), each >= 1.
        The one place the run's bound is divided."""
        n = max(1, min(self.processes, self.max_concurrency))
        total = self.max_concurrency
        return [replace(self, max_concurrency=total // n + (1 if i < total % n else 0), processes=1)
                for i in range(n)]

    def dispatch_bound(self) -> int:
        """Calls the run hands to its judge workers at once: each worker's
        share (:meth:`shares`) plus :func:`~judgeflow.judge.base.queue_ahead_for`
        that share, which the worker holds prepared so it starts a call the
        moment one of its own ends. The others wait in the run."""
        return sum(share.max_concurrency + queue_ahead_for(share.max_concurrency) for share in self.shares())
