"""A backfill's estimate, shown before it asks: the pairs it would score and
what they would cost, from the text of the range's traces at the judge's prices."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.exc import DBAPIError

from judgeflow.config.settings import Settings
from judgeflow.db import migrate
from judgeflow.db.engine import engine_for, source_engine
from judgeflow.errors import DatabaseError
from judgeflow.metrics.registry import chosen

SIZE_SAMPLE = 500  # traces whose text sizes a backfill's estimate


@dataclass
class BackfillEstimate:
    pairs: int
    traces: int
    per_metric: dict[str, int]
    cost_usd: float | None
    basis: str

    def describe(self) -> str:
        cost = "unknown" if self.cost_usd is None else f"${self.cost_usd:,.4f}"
        per = ", ".join(f"{m}: {n}" for m, n in self.per_metric.items())
        return f"{self.traces} traces to score ({per}); estimated cost {cost} ({self.basis})"


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _estimated_tokens(counts: dict[str, int], bodies: list, cap: int, metrics: list[str]
                      ) -> tuple[dict[str, int], dict[str, tuple[float, float]]]:
    """Per metric, the pairs to score and the prompt and completion tokens they
    are expected to take, from the mean size of the sampled ``bodies``."""
    from judgeflow.metrics.cost import estimate_tokens

    chars = {
        "input": _mean(min(len(b.input or ""), cap) for b in bodies),
        "output": _mean(min(len(b.output or ""), cap) for b in bodies),
        "context": _mean(min(len("" if b.context is None else json.dumps(b.context)), cap) for b in bodies),
    }
    per_metric = {m: 0 for m in metrics}
    tokens: dict[str, tuple[float, float]] = {}
    for metric in metrics:
        n = counts.get(metric, 0)
        if not n:
            continue
        per_metric[metric] = n
        # the estimate is linear in the characters, so the per-pair mean times n gives the total
        prompt, completion = estimate_tokens(metric, input_chars=chars["input"], output_chars=chars["output"],
                                             context_chars=chars["context"])
        tokens[metric] = (prompt * n, completion * n)
    return per_metric, tokens


def estimate_backfill(settings: Settings, *, since: datetime, until: datetime, rescore: bool,
                      metrics: list[str] | None = None) -> BackfillEstimate:
    """Pairs a backfill of ``metrics`` (None: every registered one) would score and what they would cost under the run
    budget's cost model (judgeflow.judge.pricing): the judge's prices times
    the tokens the pairs' text is expected to take."""
    from judgeflow.judge.pricing import prices_for, unpriced_model

    from judgeflow.db.pairs import Done, key_pages
    from judgeflow.db.pending_work import count_plan_pending
    from judgeflow.sources.trace_source import KeyFilter, read_bodies, trace_source
    from judgeflow.db.watermark import plan_reads

    engine = engine_for(settings)
    migrate.upgrade(engine)
    source = trace_source(settings)
    reader = source_engine(settings)
    metrics = chosen(metrics)
    cap = settings.max_field_chars
    done = Done(rescore_before=datetime.max.replace(tzinfo=since.tzinfo) if rescore else None)
    try:
        with engine.connect() as conn:
            plan = plan_reads(conn, source, metrics, lookback_s=0, ranged=True)
        counts = count_plan_pending(source, reader, engine, plan, metrics, done=done, since=since, until=until,
                                    settle_delay_s=settings.settle_delay_s)
        # the range's traces, counted by key through the created_at index; the
        # text of the first SIZE_SAMPLE of them stands for the rest
        traces, sample = 0, []
        for keys in key_pages(source, reader, KeyFilter(since=since, until=until), page=20_000):
            traces += len(keys)
            sample += keys[: SIZE_SAMPLE - len(sample)]
        bodies = list(read_bodies(source, reader, sample).bodies.values())
    except DBAPIError as exc:
        raise DatabaseError(f"could not estimate the backfill: {exc.orig}") from None
    per_metric, tokens = _estimated_tokens(counts, bodies, cap, metrics)
    prompt_tokens, completion_tokens = (sum(t[i] for t in tokens.values()) for i in (0, 1))
    pairs = sum(per_metric.values())
    prices = prices_for(settings)
    if prices is None:
        cost, basis = None, (f"litellm has no price for {unpriced_model(settings)}; set "
                             "JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK and JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK")
    else:  # each metric at its judge model's prices
        cost = sum(prices.of(m).cost(*t) for m, t in tokens.items())
        basis = (f"~{prompt_tokens / 1e6:.2f}M prompt + {completion_tokens / 1e6:.2f}M completion tokens "
                 f"estimated from the text of {len(bodies)} of the range's traces, at {prices.source}"
                 + "".join(f"; {m} at {p.source}" for m, p in prices.per_metric.items() if m in tokens))
        if settings.reuse_identical:
            basis += "; identical traces are judged once, so repeats cost less than this"
    scored_traces = traces if rescore else min(traces, max(per_metric.values(), default=0))
    return BackfillEstimate(pairs=pairs, traces=scored_traces, per_metric=per_metric, cost_usd=cost, basis=basis)
