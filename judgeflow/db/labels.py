"""People's labels and the probability samples drawn for them (migration 23_labels.py; issue 58).

Three tables:

- ``label_draws``: one row per `judgeflow labels sample`: the metric, the source, the judge epoch in
  force for (source, metric) when drawn (``epoch_id``), the filters (``since``, ``segment``), the seed,
  and per stratum (the judge's verdict, :data:`FAIL` / :data:`PASS`) ``{"population": N_h, "drawn": n_h}``.
- ``label_draw_items``: the results a draw picked, each with its stratum, the judge's verdict when drawn,
  its inclusion probability ``n_h / N_h`` and the result's own weight on a sampled night
  (``1 / sample_decisions.inclusion_prob``, 1 when the night was judged in full).
- ``labels``: one label per (result id, metric, labeller); ``label`` True = the person says it *fails*
  the metric (calibration's sense). ``draw_id`` is the latest draw of that metric holding the id, or
  NULL: hand-picked, stored and never used for correction (not a probability sample).

Labels count only for the judge epoch they were drawn in: :func:`labelled_sample` reads the draws of
one epoch. The pure maths (allocation, the draw, the plan) is judgeflow/calibration/label_sampling.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Sequence

from sqlalchemy import Connection, text

from judgeflow.sources.identity import of_source

FAIL, PASS = "fail", "pass"  # the strata: the judge's verdict (eval_results.passed false / true)

# the weight of a result on a sampled night, as judgeflow/sampling/decisions.py WEIGHT_SQL says it (the
# database layer sits below sampling/, so the rule is restated here over the same table)
_WEIGHT = "COALESCE(1.0 / d.inclusion_prob, 1.0)"


@dataclass(frozen=True)
class Unit:
    """A scored result a draw may pick: its id (a trace id, or a session's ``s:`` id), the judge's
    verdict, its weight on a sampled night and when its trace was created (to read it back)."""

    trace_id: str
    judged_fail: bool
    result_weight: float
    trace_created_at: datetime | None


@dataclass(frozen=True)
class Stratum:
    """One verdict stratum of a draw: ``population`` results (N_h) the draw was made from, ``drawn``
    of them picked (n_h; each with inclusion probability n_h/N_h), ``labelled`` of those with a label."""

    name: str  # FAIL or PASS
    population: int
    drawn: int
    labelled: int


@dataclass(frozen=True)
class LabelledItem:
    """A drawn result with at least one label of the draw's metric.

    ``label`` is the labellers' majority (True = fails the metric); a tie counts as *fails* (the
    conservative side for rules on a maximum rate). ``fail_votes`` of ``labellers`` said it fails.
    ``result_weight`` is the result's own weight on a sampled night (1: judged in full); ``segment`` the
    result's segment values, for estimates of a segment from a draw over every segment."""

    trace_id: str
    stratum: str
    judged_fail: bool
    inclusion_prob: float
    result_weight: float
    label: bool
    labellers: int
    fail_votes: int
    segment: dict[str, Any]


@dataclass(frozen=True)
class Draw:
    """One probability sample of an epoch's scored results of a metric, and its labelled items."""

    id: int
    metric: str
    source: str
    epoch_id: int | None
    since: datetime | None
    segment: dict[str, str]
    seed: int
    drawn_at: datetime
    strata: dict[str, Stratum]  # by name: FAIL, PASS
    items: list[LabelledItem]

    @property
    def population(self) -> int:
        """N: the results the draw was made from (its strata's populations added)."""
        return sum(s.population for s in self.strata.values())


def _population_sql(source: str, metric: str, *, in_epoch: tuple[str, dict], since: datetime | None,
                    segment: dict[str, str] | None) -> tuple[str, dict]:
    where = ["r.metric = :metric", "r.status = 'scored'", "r.passed IS NOT NULL", of_source("r.source"),
             in_epoch[0]]
    params: dict[str, Any] = {"metric": metric, "source": source, **in_epoch[1]}
    if since is not None:
        where.append("r.trace_created_at >= :since")
        params["since"] = since
    for i, (key, value) in enumerate(sorted((segment or {}).items())):
        where.append(f"r.segment->>:seg_k{i} = :seg_v{i}")
        params.update({f"seg_k{i}": key, f"seg_v{i}": value})
    return " AND ".join(where), params


def scored_units(conn: Connection, source: str, metric: str, *, in_epoch: tuple[str, dict],
                 since: datetime | None = None, segment: dict[str, str] | None = None) -> list[Unit]:
    """The scored results of ``metric`` of ``source`` a draw is made from, ordered by id (so a seed
    draws the same sample from the same results). ``in_epoch``: judgeflow/db/epochs.py in_epoch_sql's
    condition (over eval_results' unqualified columns, which no other table read here has)."""
    where, params = _population_sql(source, metric, in_epoch=in_epoch, since=since, segment=segment)
    rows = conn.execute(text(
        f"SELECT r.trace_id, NOT r.passed AS judged_fail, {_WEIGHT} AS weight, r.trace_created_at "
        f"FROM judgeflow.eval_results r "
        f"LEFT JOIN judgeflow.sample_decisions d ON d.trace_id = r.trace_id WHERE {where} ORDER BY r.trace_id"
    ), params)
    return [Unit(r.trace_id, r.judged_fail, float(r.weight), r.trace_created_at) for r in rows]


def verdict_weights(conn: Connection, source: str, metric: str, *, in_epoch: tuple[str, dict],
                    since: datetime | None = None, segment: dict[str, str] | None = None) -> dict[str, float]:
    """``{FAIL: N_fail, PASS: N_pass}`` over the same results as :func:`scored_units`, each counted
    with its weight on a sampled night: the strata's shares of the rate a correction estimates."""
    where, params = _population_sql(source, metric, in_epoch=in_epoch, since=since, segment=segment)
    rows = conn.execute(text(
        f"SELECT NOT r.passed AS judged_fail, sum({_WEIGHT}) AS weight FROM judgeflow.eval_results r "
        f"LEFT JOIN judgeflow.sample_decisions d ON d.trace_id = r.trace_id WHERE {where} GROUP BY 1"
    ), params)
    out = {FAIL: 0.0, PASS: 0.0}
    for r in rows:
        out[FAIL if r.judged_fail else PASS] = float(r.weight)
    return out


def record_draw(conn: Connection, *, metric: str, source: str, epoch_id: int | None, since: datetime | None,
                segment: dict[str, str] | None, requested: int, seed: int, strata: dict[str, dict[str, int]],
                items: Sequence[tuple[Unit, str, float]]) -> int:
    """Insert a draw and its items ``(unit, stratum, inclusion_prob)`` in the caller's transaction;
    returns the draw's id."""
    draw_id = conn.execute(text(
        "INSERT INTO judgeflow.label_draws (metric, source, epoch_id, since, segment, requested, seed, strata) "
        "VALUES (:metric, :source, :epoch_id, :since, CAST(:segment AS jsonb), :requested, :seed, "
        "CAST(:strata AS jsonb)) RETURNING id"
    ), {"metric": metric, "source": source, "epoch_id": epoch_id, "since": since,
        "segment": json.dumps(segment or {}), "requested": requested, "seed": seed,
        "strata": json.dumps(strata)}).scalar_one()
    if items:
        conn.execute(text(
            "INSERT INTO judgeflow.label_draw_items "
            "(draw_id, trace_id, stratum, judged_fail, inclusion_prob, result_weight) "
            "VALUES (:draw_id, :trace_id, :stratum, :judged_fail, :p, :w)"
        ), [{"draw_id": draw_id, "trace_id": u.trace_id, "stratum": s, "judged_fail": u.judged_fail, "p": p,
             "w": u.result_weight} for u, s, p in items])
    return draw_id


@dataclass(frozen=True)
class Standing:
    """What the database knows of one result id, for an import: the metrics it was scored for (of the
    source), and per metric the latest draw (of the source) that holds it."""

    scored: frozenset[str]
    latest_draw: dict[str, int]


def standings(conn: Connection, source: str, ids: Iterable[str]) -> dict[str, Standing]:
    """Per id (each of ``ids`` present): its scored metrics and latest draws, two reads in all."""
    wanted = sorted(set(ids))
    scored: dict[str, set[str]] = {i: set() for i in wanted}
    for row in conn.execute(text(
        f"SELECT trace_id, metric FROM judgeflow.eval_results WHERE trace_id = ANY(:ids) AND status = 'scored' "
        f"AND {of_source()}"
    ), {"ids": wanted, "source": source}):
        scored[row.trace_id].add(row.metric)
    draws: dict[str, dict[str, int]] = {i: {} for i in wanted}
    for row in conn.execute(text(
        "SELECT DISTINCT ON (i.trace_id, d.metric) i.trace_id, d.metric, d.id FROM judgeflow.label_draw_items i "
        "JOIN judgeflow.label_draws d ON d.id = i.draw_id WHERE i.trace_id = ANY(:ids) AND d.source = :source "
        "ORDER BY i.trace_id, d.metric, d.drawn_at DESC, d.id DESC"
    ), {"ids": wanted, "source": source}):
        draws[row.trace_id][row.metric] = row.id
    return {i: Standing(frozenset(scored[i]), draws[i]) for i in wanted}


def store_labels(conn: Connection, rows: Sequence[dict[str, Any]]) -> int:
    """Upsert labels ``{trace_id, metric, label, labeller, draw_id}``: the latest import wins per
    (id, metric, labeller). Returns the rows written."""
    if not rows:
        return 0
    conn.execute(text(
        "INSERT INTO judgeflow.labels (trace_id, metric, label, labeller, draw_id) "
        "VALUES (:trace_id, :metric, :label, :labeller, :draw_id) "
        "ON CONFLICT (trace_id, metric, labeller) DO UPDATE SET label = EXCLUDED.label, "
        "draw_id = EXCLUDED.draw_id, imported_at = now()"
    ), list(rows))
    return len(rows)


def session_keys(conn: Connection, ids: Sequence[str]) -> dict[str, str]:
    """The ``session_key`` of each session result id (judgeflow.sessions, migration 24)."""
    if not ids:
        return {}
    rows = conn.execute(text("SELECT session_id, session_key FROM judgeflow.sessions WHERE session_id = ANY(:ids)"),
                        {"ids": list(ids)})
    return {r.session_id: r.session_key for r in rows}


def labelled_sample(conn: Connection, source: str, metric: str, epoch_id: int | None,
                    segment: dict[str, str] | None = None) -> list[Draw]:
    """The draws of ``metric`` of ``source`` made in judge epoch ``epoch_id`` (None: draws made before
    any epoch was recorded), oldest first, each with its strata and its labelled items.

    ``segment`` None: the draws over every segment (drawn without ``--segment``); a dict: the draws made
    with exactly that ``--segment`` filter. A draw over every segment also serves a segment's estimate
    through its items' ``segment`` (a domain of the sample). Labels of hand-picked items (draw_id NULL)
    and of other epochs' draws are never returned; an item drawn but not labelled yet is counted in its
    stratum's ``drawn`` and not in ``labelled`` or ``items``."""
    draws = list(conn.execute(text(
        "SELECT id, metric, source, epoch_id, since, segment, seed, strata, drawn_at FROM judgeflow.label_draws "
        "WHERE source = :source AND metric = :metric AND epoch_id IS NOT DISTINCT FROM :epoch_id "
        "AND segment = CAST(:segment AS jsonb) ORDER BY drawn_at, id"
    ), {"source": source, "metric": metric, "epoch_id": epoch_id, "segment": json.dumps(segment or {})}))
    if not draws:
        return []
    items: dict[int, list[LabelledItem]] = {d.id: [] for d in draws}
    for r in conn.execute(text(
        "SELECT i.draw_id, i.trace_id, i.stratum, i.judged_fail, i.inclusion_prob, i.result_weight, "
        "count(*) AS labellers, count(*) FILTER (WHERE l.label) AS fail_votes, "
        "COALESCE((SELECT e.segment FROM judgeflow.eval_results e WHERE e.trace_id = i.trace_id "
        "AND e.metric = :metric), '{}'::jsonb) AS segment "
        "FROM judgeflow.label_draw_items i JOIN judgeflow.labels l "
        "ON l.trace_id = i.trace_id AND l.draw_id = i.draw_id AND l.metric = :metric "
        "WHERE i.draw_id = ANY(:draws) GROUP BY i.draw_id, i.trace_id ORDER BY i.draw_id, i.trace_id"
    ), {"metric": metric, "draws": list(items)}):
        items[r.draw_id].append(LabelledItem(
            trace_id=r.trace_id, stratum=r.stratum, judged_fail=r.judged_fail, inclusion_prob=r.inclusion_prob,
            result_weight=r.result_weight, label=2 * r.fail_votes >= r.labellers, labellers=r.labellers,
            fail_votes=r.fail_votes, segment=dict(r.segment)))
    out = []
    for d in draws:
        labelled = {name: sum(1 for i in items[d.id] if i.stratum == name) for name in d.strata}
        strata = {name: Stratum(name, int(s["population"]), int(s["drawn"]), labelled[name])
                  for name, s in d.strata.items()}
        out.append(Draw(id=d.id, metric=d.metric, source=d.source, epoch_id=d.epoch_id, since=d.since,
                        segment=dict(d.segment), seed=d.seed, drawn_at=d.drawn_at, strata=strata,
                        items=items[d.id]))
    return out
