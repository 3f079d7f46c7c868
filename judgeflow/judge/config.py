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

from judgeflow.judge.base import queue_ahead_for
from judgeflow.judge.retry import CallRetry, RetryPolicy
from judgeflow.metrics.registry import MetricSpec, registered, spec_of

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings

# More workers than this buy nothing at the concurrency one run allows, and
# each costs memory (docs/benchmark.md).
MAX_DEFAULT_JUDGE_PROCESSES = 4
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"


def is_offline_model(model: str) -> bool:
    return model == "offline" or model.startswith("offline/")


def metric_judge_model(run_model: str, spec: MetricSpec) -> str:
    """The model that judges ``spec``'s metric in a run whose judge is
    ``run_model``: the metric's own (``MetricSpec.judge_model``), else the
    run's. An offline run judges every metric offline: it sends nothing."""
    if is_offline_model(run_model) or not spec.judge_model:
        return run_model
    return spec.judge_model


def own_judge_model(run_model: str, metric: str) -> str | None:
    """The model a pair of ``metric`` asks instead of the run's judge model, or
    None when the run's judges it (its requests then name no model)."""
    model = metric_judge_model(run_model, spec_of(metric))
    return None if model == run_model else model


def judge_models(run_model: str, metrics: "list[str] | tuple[str, ...] | None" = None) -> dict[str, str]:
    """``{metric: the model that judges it}``, every registered metric or ``metrics``."""
    specs = registered()
    return {name: metric_judge_model(run_model, specs[name]) for name in (specs if metrics is None else metrics)}


def metric_models(run_model: str) -> tuple[str, ...]:
    """The models the registered metrics ask besides the run's, each once, in order."""
    return tuple(dict.fromkeys(m for m in judge_models(run_model).values() if m != run_model))


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
    processes: int = 1
    # the models metrics ask instead of ``model`` (their own judge model): each priced from litellm's map,
    # never at ``prices_per_mtok``, which are ``model``'s
    metric_models: tuple[str, ...] = ()
    # a batch call's price as a fraction of the online one, where litellm's map has no batch prices
    batch_discount: float = 0.5

    @classmethod
    def from_settings(cls, settings: "Settings") -> "JudgeConfig":
        prices = (settings.judge_input_cost_per_mtok, settings.judge_output_cost_per_mtok)
        return cls(
            model=settings.judge_model,
            api_base=settings.judge_api_base.get_secret_value() if settings.judge_api_base is not None else None,
            api_key=settings.judge_api_key.get_secret_value() if settings.judge_api_key is not None else None,
            timeout_s=float(settings.judge_timeout_s),
            retry=RetryPolicy.from_settings(settings).call,
            max_concurrency=int(settings.max_concurrency),
            prices_per_mtok=None if None in prices else (float(prices[0]), float(prices[1])),
            processes=judge_process_count(settings),
            metric_models=metric_models(settings.judge_model),
            batch_discount=float(settings.judge_batch_discount),
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
