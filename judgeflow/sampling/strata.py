"""A night's traffic per stratum, priced trace by trace, and what history says
of each stratum's failing rate.

A trace's stratum is the values of the ``JUDGEFLOW_STRATIFY_BY`` keys of its
metadata (default: the alert segment keys), ``app=checkout,model=m1``; a key
the metadata does not hold (or holds no scalar for) is ``other`` for it, so
no trace is ever dropped. With no keys there is one stratum, ``all``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import Connection, text

from judgeflow.alerts.segments import segment_values
from judgeflow.sources.types import TraceBody, TraceKey

ALL = "all"
MISSING = "other"


def stratum_of(metadata: Any, keys: Sequence[str]) -> str:
    if not keys:
        return ALL
    values = segment_values(metadata, list(keys))
    return ",".join(f"{k}={values.get(k, MISSING)}" for k in keys)


@dataclass
class Traffic:
    """The night's candidates: per stratum, their keys and (per metric) their
    estimated costs (each trace's own, judgeflow/sampling/prices.py), and the
    stratify keys any of them holds."""

    keys: dict[str, list[TraceKey]] = field(default_factory=dict)
    token_cost: dict[str, dict[str, float]] = field(default_factory=dict)  # summed over the stratum's traces
    squares: dict[str, float] = field(default_factory=dict)  # a trace's cost, every metric, squared and summed
    seen_keys: set[str] = field(default_factory=set)

    def add(self, stratum: str, key: TraceKey, costs: dict[str, float]) -> None:
        self.keys.setdefault(stratum, []).append(key)
        summed = self.token_cost.setdefault(stratum, {})
        for metric, cost in costs.items():
            summed[metric] = summed.get(metric, 0.0) + cost
        self.squares[stratum] = self.squares.get(stratum, 0.0) + sum(costs.values()) ** 2

    def merge(self, other: "Traffic") -> None:
        for stratum, keys in other.keys.items():
            self.keys.setdefault(stratum, []).extend(keys)
            summed = self.token_cost.setdefault(stratum, {})
            for metric, cost in other.token_cost.get(stratum, {}).items():
                summed[metric] = summed.get(metric, 0.0) + cost
            self.squares[stratum] = self.squares.get(stratum, 0.0) + other.squares.get(stratum, 0.0)
        self.seen_keys |= other.seen_keys

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.keys.values())

    def cost_per_trace(self, stratum: str, metrics: list[str]) -> float:
        """What judging one trace of ``stratum`` costs on average, every metric: its traces' own estimates."""
        n = len(self.keys[stratum])
        own = self.token_cost.get(stratum, {})
        return sum(own.get(m, 0.0) for m in metrics) / n

    def cost_sd(self, stratum: str, metrics: list[str], spread: float) -> float:
        """How far one trace's bill strays from the stratum's mean: the spread
        of its traces' estimates, and each bill's own ``spread`` (coefficient
        of variation) about its estimate."""
        n = len(self.keys[stratum])
        mean = self.cost_per_trace(stratum, metrics)
        between = max(self.squares.get(stratum, 0.0) / n - mean ** 2, 0.0)
        return math.sqrt(between + (spread * mean) ** 2)


def unknown_keys(traffic: Traffic, stratify_keys: Sequence[str]) -> list[str]:
    """The stratify keys no trace of the night holds in its metadata: a typo, or a key the traces do not carry."""
    if not traffic.total:
        return []
    return [k for k in stratify_keys if k not in traffic.seen_keys]


def undecided_new_keys(conn: Connection, keys: Sequence[TraceKey], metrics: list[str]) -> list[TraceKey]:
    """Of ``keys``, those no sample decision covers yet that lack a result row
    for some metric (new traces; pairs being retried were decided before)."""
    if not keys:
        return []
    rows = conn.execute(
        text(
            """
            SELECT DISTINCT k.id FROM unnest(CAST(:ids AS text[])) AS k(id)
            WHERE NOT EXISTS (SELECT 1 FROM judgeflow.sample_decisions d WHERE d.trace_id = k.id)
              AND EXISTS (SELECT 1 FROM unnest(CAST(:metrics AS text[])) AS m(metric)
                          WHERE NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r
                                            WHERE r.trace_id = k.id AND r.metric = m.metric))
            """
        ),
        {"ids": [k.id for k in keys], "metrics": list(metrics)},
    ).scalars().all()
    wanted = set(rows)
    return [k for k in dict.fromkeys(keys) if k.id in wanted]


def stratify(bodies: dict[str, TraceBody], keys: Sequence[TraceKey], stratify_keys: Sequence[str],
             cost_of) -> Traffic:
    """Group ``keys`` by stratum; a key whose body could not be read is in the
    stratum of missing values (it is still judged or sampled, never dropped).
    ``cost_of(body)``: per metric, the token estimate of judging it."""
    traffic = Traffic()
    for key in keys:
        body = bodies.get(key.id)
        metadata = body.metadata if body else None
        stratum = stratum_of(metadata, stratify_keys)
        traffic.seen_keys.update(segment_values(metadata, list(stratify_keys)))
        traffic.add(stratum, key, cost_of(body) if body else {})
    return traffic


def _stratum_label(stratify_keys: Sequence[str], params: dict[str, Any]) -> str:
    """SQL: a result's stratum from ``eval_results.segment`` (which holds the
    stored segment keys, Settings.stored_segment_keys: a stratify key that is not one of them reads as ``other``)."""
    params.update(other=MISSING, all=ALL)
    parts = []
    for i, key in enumerate(stratify_keys):
        params[f"k{i}"], params[f"p{i}"] = key, f"{key}="
        parts.append(f"CAST(:p{i} AS text) || coalesce(segment ->> CAST(:k{i} AS text), CAST(:other AS text))")
    return " || ',' || ".join(parts) if parts else "CAST(:all AS text)"


def recent_fail_rates(conn: Connection, metrics: list[str], stratify_keys: Sequence[str], *,
                      since: datetime) -> dict[str, float]:
    """Per stratum, the mean over ``metrics`` of the share of scored results
    that did not pass since ``since``, from ``eval_results.segment`` (which
    holds the stored segment keys: a stratify key that is not one of them reads
    as ``other``)."""
    params: dict[str, Any] = {"metrics": list(metrics), "since": since}
    label = _stratum_label(stratify_keys, params)
    rows = conn.execute(
        text(
            f"""
            SELECT {label} AS stratum, metric, avg(CASE WHEN passed IS NOT TRUE THEN 1.0 ELSE 0.0 END) AS rate
            FROM judgeflow.eval_results
            WHERE metric = ANY(CAST(:metrics AS text[])) AND trace_created_at >= :since AND status = 'scored'
            GROUP BY 1, 2
            """
        ),
        params,
    ).all()
    per: dict[str, list[float]] = {}
    for stratum, _metric, rate in rows:
        per.setdefault(stratum, []).append(float(rate))
    return {s: sum(r) / len(r) for s, r in per.items()}

