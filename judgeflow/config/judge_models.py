"""Which model judges a metric: the metric's own judge model (a metrics file's
``model``, ``MetricSpec.judge_model``), else the run's. An offline run judges
every metric offline: it sends nothing. The one rule, read by epochs, the
reuse key, prices (``Prices.of(metric)``), the key's destinations, status,
``judgeflow metrics`` and the judge's configuration (the models its workers
price)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from judgeflow.errors import MetricError

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings


def is_offline_model(model: str) -> bool:
    return model == "offline" or model.startswith("offline/")


def metric_judge_model(run_model: str, own_model: str | None) -> str:
    """The model that judges a metric whose own judge model is ``own_model`` in a run judged by ``run_model``."""
    if is_offline_model(run_model) or not own_model:
        return run_model
    return own_model


def judge_models(settings: "Settings", metrics: Iterable[str] | None = None) -> dict[str, str]:
    """``{metric: the model that judges it}``, every metric ``settings`` serve or ``metrics``."""
    specs = settings.metric_specs()
    # a session rate (rate_of: its trace metric) is computed from results, judged by no model
    names = [n for n, spec in specs.items() if spec.rate_of is None] if metrics is None else list(metrics)
    unknown = [name for name in names if name not in specs]
    if unknown:
        raise MetricError(f"unknown metric {unknown[0]!r}; choose from {', '.join(specs)}")
    return {name: metric_judge_model(settings.judge_model, specs[name].judge_model) for name in names}


def own_judge_model(settings: "Settings", metric: str) -> str | None:
    """The model a pair of ``metric`` asks instead of the run's judge model, or
    None when the run's judges it (its requests then name no model)."""
    model = judge_models(settings, (metric,))[metric]
    return None if model == settings.judge_model else model


def metric_models(settings: "Settings") -> tuple[str, ...]:
    """The models the metrics ask besides the run's, each once, in order."""
    return tuple(dict.fromkeys(m for m in judge_models(settings).values() if m != settings.judge_model))
