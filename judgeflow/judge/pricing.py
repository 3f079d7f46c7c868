"""What judging costs: one cost model for run budgets, backfill estimates and
(when prices are configured) the ``cost_usd`` of each result.

Prices come from ``JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK`` /
``JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK`` when set, else from litellm's bundled
price map (imported only when a price is asked for, never at CLI start-up);
the offline judge is free. A metric with its own judge model
(``MetricSpec.judge_model``) is priced from the map for that model: the
configured prices are the run's judge model's. Tokens of a pair not yet scored are estimated from
the length of its text, by each metric's declared cost
(:mod:`judgeflow.metrics.cost`).

With ``JUDGEFLOW_JUDGE_BATCH`` on, the run's calls go through the provider's
batch API, so every estimate prices pairs at the batch rate: litellm's batch
prices for the model where its map has them, else the online prices times
``JUDGEFLOW_JUDGE_BATCH_DISCOUNT`` (configured prices always so: they are the
online ones). :attr:`Prices.source` says which. Estimates assume no prompt
cache hit; recorded usage prices its cached tokens at the cached rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from judgeflow.config.judge_models import is_offline_model, judge_models
from judgeflow.errors import ConfigError
from judgeflow.judge.spend import usage_cost

if TYPE_CHECKING:
    from judgeflow.config.settings import Settings


@dataclass(frozen=True)
class Prices:
    """The run's judge model's prices; ``per_metric``: a metric judged by a model of its own at that model's.
    ``cached_input_per_mtok``: prompt tokens served from the provider's cache; None: the input price."""

    input_per_mtok: float
    output_per_mtok: float
    source: str
    per_metric: Mapping[str, "Prices"] = field(default_factory=dict)
    cached_input_per_mtok: float | None = None

    def cost(self, prompt_tokens: float, completion_tokens: float, cached_tokens: float = 0.0) -> float:
        return usage_cost((self.input_per_mtok, self.output_per_mtok), prompt_tokens, completion_tokens,
                          cached_tokens, self.cached_input_per_mtok)

    def of(self, metric: str) -> "Prices":
        """The prices ``metric``'s pairs are judged at."""
        return self.per_metric.get(metric, self)

    def discounted(self, discount: float, why: str) -> "Prices":
        """These prices times ``discount`` (a batch rate), ``why`` added to the source."""
        cached = None if self.cached_input_per_mtok is None else self.cached_input_per_mtok * discount
        return replace(self, input_per_mtok=self.input_per_mtok * discount,
                       output_per_mtok=self.output_per_mtok * discount, cached_input_per_mtok=cached,
                       source=f"{self.source} x {why}", per_metric={})


def map_prices(model: str) -> Prices | None:
    """``model``'s prices in litellm's price map, or None when it has none."""
    from judgeflow.judge.litellm_judge import model_cached_price, model_prices  # imports litellm

    per_token = model_prices(model)
    if per_token is None:
        return None
    cached = model_cached_price(model)
    return Prices(per_token[0] * 1_000_000, per_token[1] * 1_000_000, f"litellm's price map for {model}",
                  cached_input_per_mtok=None if cached is None else cached * 1_000_000)


def _batch_rate(settings: "Settings", model: str, online: Prices | None) -> Prices | None:
    """``model``'s prices through the provider's batch API: litellm's batch prices, else ``online``'s discounted."""
    from judgeflow.judge.litellm_judge import model_batch_prices  # imports litellm

    per_token = model_batch_prices(model)
    if per_token is not None:
        cached = None if online is None or online.cached_input_per_mtok is None else (
            online.cached_input_per_mtok * settings.judge_batch_discount)
        return Prices(per_token[0] * 1_000_000, per_token[1] * 1_000_000, f"litellm's batch prices for {model}",
                      cached_input_per_mtok=cached)
    return None if online is None else _discounted(settings, online)


def _discounted(settings: "Settings", online: Prices) -> Prices:
    """``online`` times the configured batch discount."""
    return online.discounted(settings.judge_batch_discount,
                             f"JUDGEFLOW_JUDGE_BATCH_DISCOUNT={settings.judge_batch_discount:g}")


def _model_prices(settings: "Settings", model: str, *, online: bool) -> Prices | None:
    """A metric's own judge ``model``'s prices from the map, at the batch rate when the run batches."""
    prices = map_prices(model)
    return prices if online or not settings.judge_batch else _batch_rate(settings, model, prices)


def _judge_prices(settings: "Settings", *, online: bool = False) -> Prices | None:
    batch = settings.judge_batch and not online
    if settings.judge_input_cost_per_mtok is not None and settings.judge_output_cost_per_mtok is not None:
        prices = Prices(settings.judge_input_cost_per_mtok, settings.judge_output_cost_per_mtok,
                        "JUDGEFLOW_JUDGE_INPUT/OUTPUT_COST_PER_MTOK",
                        cached_input_per_mtok=settings.judge_cached_input_cost_per_mtok)
        return _discounted(settings, prices) if batch else prices
    if is_offline_model(settings.judge_model):
        return Prices(0.0, 0.0, "the offline judge is free")
    return _model_prices(settings, settings.judge_model, online=online)


def unpriced_model(settings: "Settings", *, own_models: bool = True) -> str | None:
    """The first judge model (the run's, then the metrics' own) nobody knows the prices of; None: all priced."""
    if _judge_prices(settings) is None:
        return settings.judge_model
    models = judge_models(settings).values() if own_models else ()
    return next((m for m in dict.fromkeys(models)
                 if m != settings.judge_model and _model_prices(settings, m, online=False) is None), None)


def prices_for(settings: "Settings", *, own_models: bool = True, online: bool = False) -> Prices | None:
    """The judge's prices, each metric with a judge model of its own at that model's (``own_models``; a
    shadow's candidate judges every metric), or None when nobody knows one of them. At the batch rate
    when ``JUDGEFLOW_JUDGE_BATCH`` is on, unless ``online``: what the same calls cost online."""
    prices = _judge_prices(settings, online=online)
    if prices is None or not own_models:
        return prices
    per_metric = {}
    for metric, model in judge_models(settings).items():
        if model != settings.judge_model:
            own = _model_prices(settings, model, online=online)
            if own is None:
                return None
            per_metric[metric] = own
    return replace(prices, per_metric=per_metric) if per_metric else prices


def require_prices(settings: "Settings", *, why: str) -> Prices:
    prices = prices_for(settings)
    if prices is None:
        model = unpriced_model(settings)
        if model != settings.judge_model:
            raise ConfigError(
                f"{why}, but litellm has no price for judge model {model!r}, the judge model of metric(s) "
                f"{', '.join(m for m, own in judge_models(settings).items() if own == model)} "
                "(their 'model' in JUDGEFLOW_METRICS_FILE): choose a model litellm prices, or remove the budget"
            )
        raise ConfigError(
            f"{why}, but litellm has no price for judge model {settings.judge_model!r}: set "
            "JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK and JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK (USD per million tokens)"
        )
    return prices
