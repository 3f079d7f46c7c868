"""The reference a rollup figure is compared with: a rule's figures counted
straight from ``eval_results`` by the statements the rules ran before the
rollup existed (one counting statement per rule and key, one more for the
sample classes of a sampled period), independent of judgeflow/db/rollup.py
and judgeflow/alerts/tally.py."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, text

from judgeflow.alerts.estimates import StratumCounts, WeightedCounts
from judgeflow.alerts.evaluation import OTHER, OVERALL, Figures, Segment, _conditions, _periods, figures_from_counts, rule_metrics
from judgeflow.alerts.rules import Rule
from judgeflow.db.epochs import current_epochs, in_epoch_sql, latest_start
from judgeflow.sampling.decisions import WEIGHT_JOIN
from judgeflow.sources.identity import of_source


def _counts_sql(rule: Rule, value_expr: str, extra_where: str, in_epoch: str) -> str:
    counted, bad = _conditions(rule)
    counted, bad = f"{counted} AND {in_epoch}", f"{bad} AND {in_epoch}"
    return f"""
        SELECT {value_expr} AS value,
            count(*) FILTER (WHERE {counted} AND trace_created_at >= :start) AS samples,
            count(*) FILTER (WHERE status = 'failed' AND {in_epoch} AND trace_created_at >= :start) AS failed,
            count(*) FILTER (WHERE {counted} AND trace_created_at < :start) AS base_samples,
            count(*) FILTER (WHERE NOT {in_epoch} AND trace_created_at >= :start) AS other_epoch,
            count(*) FILTER (WHERE NOT {in_epoch} AND trace_created_at < :start) AS other_base
        FROM judgeflow.eval_results
        WHERE metric = ANY(CAST(:metrics AS text[])) AND trace_created_at >= :base_start AND {of_source()}{extra_where}
    """


def _window_statement(rule: Rule, key: str | None, in_epoch: str) -> str:
    if key is None:
        return _counts_sql(rule, "NULL::text", "", in_epoch)
    per_value = _counts_sql(rule, "segment ->> :key", " AND (segment ->> :key) IS NOT NULL", in_epoch) + " GROUP BY 1"
    return f"""
        WITH per_value AS ({per_value}),
        ranked AS (SELECT *, row_number() OVER (
            ORDER BY samples + base_samples + other_epoch + other_base DESC, value) AS rank FROM per_value)
        SELECT CASE WHEN rank <= :top OR value = ANY(CAST(:keep AS text[])) THEN value ELSE :other END AS value,
               bool_and(rank > :top AND NOT value = ANY(CAST(:keep AS text[]))) AS grouped,
               sum(failed)::bigint AS failed, sum(other_epoch)::bigint AS other_epoch,
               sum(other_base)::bigint AS other_base
        FROM ranked GROUP BY 1 ORDER BY sum(samples + base_samples + other_epoch + other_base) DESC, 1
    """


def _class_statement(rule: Rule, key: str | None, in_epoch: str) -> str:
    counted, bad = _conditions(rule)
    value = "NULL::text" if key is None else "segment ->> :key"
    has_key = "" if key is None else " AND (segment ->> :key) IS NOT NULL"
    return f"""
        SELECT {value} AS value, trace_created_at >= :start AS in_window,
               coalesce(d.inclusion_prob, 1.0) AS prob,
               count(*) FILTER (WHERE {counted}) AS n, count(*) FILTER (WHERE {bad}) AS bad
        FROM judgeflow.eval_results{WEIGHT_JOIN}
        WHERE metric = ANY(CAST(:metrics AS text[])) AND trace_created_at >= :base_start AND {of_source()}
          AND {in_epoch}{has_key}
        GROUP BY 1, 2, d.night, d.stratum, 3
    """


def raw_figures(conn: Connection, rule: Rule, *, now: datetime, key: str | None = None,
                keep: tuple[str, ...] = ()) -> list[Figures]:
    """The rule's figures overall (``key`` None) or per value of ``key``, from the results alone."""
    epochs = current_epochs(conn, rule.source)
    start, base_start = _periods(rule, now)
    in_epoch, epoch_params = in_epoch_sql(epochs, rule_metrics(rule))
    params = dict(epoch_params, metrics=rule_metrics(rule), start=start, base_start=base_start, source=rule.source,
                  key=key, top=rule.segment_top, keep=list(keep), other=OTHER)
    rows = conn.execute(text(_window_statement(rule, key, in_epoch)), params).all()
    classes: dict[tuple[str | None, bool], list[StratumCounts]] = {}
    for r in conn.execute(text(_class_statement(rule, key, in_epoch)), params):
        if r.n:
            classes.setdefault((r.value, bool(r.in_window)), []).append(StratumCounts(int(r.n), int(r.bad), float(r.prob)))
    named = tuple(r.value for r in rows if key is not None and not r.grouped)
    out = []
    for r in rows:
        grouped = key is not None and bool(r.grouped)

        def period(window: bool) -> WeightedCounts:
            if grouped:
                return WeightedCounts.from_strata(
                    [c for (v, w), cs in classes.items() if w == window and v not in named for c in cs])
            return WeightedCounts.from_strata(classes.get((r.value, window), []))

        segment = OVERALL if key is None else Segment(key, r.value, named=named if grouped else (), is_other=grouped)
        out.append(figures_from_counts(
            period(True), period(False), failed=int(r.failed or 0), evaluated_at=now, window_start=start,
            segment=segment, baseline_start=base_start, epoch_started_at=latest_start(epochs, rule_metrics(rule)),
            other_epoch=int(r.other_epoch or 0), other_epoch_baseline=int(r.other_base or 0)))
    return out
