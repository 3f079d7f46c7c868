"""Tonight's prices for a sample plan: each trace priced from its own text
(the token estimate of :mod:`judgeflow.metrics.cost`), corrected per judge
model by what the judge really billed for the newest results against the
token estimate of the same pairs; and how far one trace's bill strays from
its estimate, which the plan's headroom is sized from
(judgeflow/sampling/allocation.py).

The correction is read from the results of the newest ``RECENT_PAIRS``
traces of each metric judged with a judge call (created within ``since``,
read newest first on the metric's index by creation time): their traces' text is read again
from the source and estimated as tonight's traces are, so the ratio is the
estimate's own error. The error is not the same for short and long traces (a
prompt's fixed part is estimated apart from its text), so a ratio is kept per
model and per band of estimated cost (a factor of two wide): a trace is
corrected by its own band's ratio; in a band the history has not seen (traces
that turned long) by the dearer of the model's ratio and none, so a price is
never extrapolated below its estimate or below what the history billed. Once a run has
judged tonight's traces the newest results are theirs, so a plan made again after a pass (a
top-up, a raised budget) is priced from tonight's bills.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable

from sqlalchemy import Connection, Engine, text

from judgeflow.sources.trace_source import TraceSource, read_bodies
from judgeflow.sources.types import TraceKey

# pairs per metric the correction is read from, and the fewest a model needs for one
RECENT_PAIRS = 200
MIN_PAIRS = 20
# with no history, a trace's bill is taken to stray this much (coefficient of
# variation) from its token estimate: the bills of ordinary traffic vary about
# 30% per trace (issue 60's audit: lognormal, log-sd 0.3)
DEFAULT_SPREAD = 0.3


def band(estimated_usd: float) -> int:
    """The band of an estimate: estimates within a factor of two share one."""
    return math.floor(math.log2(estimated_usd)) if estimated_usd > 0 else -10**6


@dataclass(frozen=True)
class PriceCorrection:
    """Per judge model (and per band of estimate), billed / estimated over its
    newest results, and the coefficient of variation of a pair's bill about its
    corrected estimate (pooled over models)."""

    ratios: dict[str, float] = field(default_factory=dict)
    spread: float = DEFAULT_SPREAD
    pairs: int = 0  # the pairs the ratios were read from
    bands: dict[tuple[str, int], float] = field(default_factory=dict)

    def ratio(self, model: str, estimated_usd: float | None = None) -> float:
        """The factor a pair of ``model`` estimated at ``estimated_usd`` is priced at (the module doc)."""
        if model not in self.ratios:
            return 1.0
        if estimated_usd is None:
            return self.ratios[model]
        return self.bands.get((model, band(estimated_usd)), max(self.ratios[model], 1.0))


def _ratio(xs: list[tuple[float, float]]) -> float:
    return sum(b for b, _ in xs) / sum(e for _, e in xs)


def correction(pairs: Iterable[tuple[str, float, float]]) -> PriceCorrection:
    """From (model, billed, estimated) per pair: a model's ratio (and each of
    its bands') where it has ``MIN_PAIRS``, and the spread of billed over the
    corrected estimate."""
    by: dict[str, list[tuple[float, float]]] = {}
    for model, billed, estimated in pairs:
        if billed > 0 and estimated > 0:
            by.setdefault(model, []).append((billed, estimated))
    ratios = {m: _ratio(xs) for m, xs in by.items() if len(xs) >= MIN_PAIRS}
    banded: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for m, xs in by.items():
        for b, e in xs:
            banded.setdefault((m, band(e)), []).append((b, e))
    bands = {k: _ratio(xs) for k, xs in banded.items() if k[0] in ratios and len(xs) >= MIN_PAIRS}
    ratios_of = PriceCorrection(ratios, bands=bands)
    rel = [b / (e * ratios_of.ratio(m, e)) for m, xs in by.items() if m in ratios for b, e in xs]
    if len(rel) < MIN_PAIRS:
        return PriceCorrection(ratios, DEFAULT_SPREAD, len(rel), bands)
    mean = sum(rel) / len(rel)
    spread = math.sqrt(sum((x - mean) ** 2 for x in rel) / (len(rel) - 1)) / mean
    return PriceCorrection(ratios, spread, len(rel), bands)


def recent_correction(conn: Connection, source: TraceSource, source_engine: Engine, metrics: list[str], *,
                      since: datetime, model_of: Callable[[str], str],
                      estimate: Callable[[str, object], float]) -> PriceCorrection:
    """The correction from the newest results of ``metrics`` (see the module
    doc); ``model_of(metric)``: the model that judges it; ``estimate(metric,
    body)``: the token estimate of a pair in USD."""
    rows = conn.execute(
        text(
            """
            SELECT r.trace_id, r.trace_created_at, r.metric, r.cost_usd
            FROM unnest(CAST(:metrics AS text[])) AS m(metric)
            CROSS JOIN LATERAL (
                SELECT trace_id, trace_created_at, metric, cost_usd FROM judgeflow.eval_results
                WHERE metric = m.metric AND trace_created_at >= :since AND status = 'scored'
                  AND judge_calls > 0 AND cost_usd > 0
                ORDER BY trace_created_at DESC LIMIT :n) r
            """
        ),
        {"metrics": list(metrics), "since": since, "n": RECENT_PAIRS},
    ).all()
    if not rows:
        return PriceCorrection()
    bodies = read_bodies(source, source_engine, [TraceKey(r.trace_id, r.trace_created_at) for r in rows]).bodies
    return correction((model_of(r.metric), float(r.cost_usd), estimate(r.metric, bodies[r.trace_id]))
                      for r in rows if r.trace_id in bodies)
