"""Read-only figures for people: results per metric, pending work, and the
estimated cost of a backfill from what past scores actually cost."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from judgeflow.db import migrate
from judgeflow.db.engine import engine_for
from judgeflow.db.pending import count_pending, held, pending_where
from judgeflow.db.source import SourceTable
from judgeflow.errors import DatabaseError
from judgeflow.settings import Settings
from judgeflow.tasks.work import METRIC_NAMES


def result_counts(settings: Settings) -> dict[str, dict[str, int]]:
    """Per metric: results by status (and passed), plus the pairs without a
    done result split by their claims; see :func:`work_status`."""
    return work_status(settings)["metrics"]


def work_status(settings: Settings) -> dict:
    """What is true in the database right now, per metric:

    - ``scored``/``passed``/``skipped``/``failed``: stored results by status;
    - ``given_up``: of ``failed``, pairs that failed in JUDGEFLOW_MAX_RUNS_PER_PAIR
      runs, which the nightly run no longer retries (``score --retry-failed`` does);
    - ``pending``: pairs without a done result that no live run holds (what the
      next run would take), of which ``stranded`` are claimed by a run that
      is gone or whose lease ran out (the next run takes them over at once);
    - ``in_progress``: pairs without a done result held by a live run;
    - ``superseded``: late results of runs that had lost the pair (recorded,
      never stored over the result).

    ``pending + in_progress`` is the number of pairs without a done result.
    ``runs`` lists the runs holding claims: flow run, live or not, pairs per
    metric, and when their lease ends."""
    engine = engine_for(settings)
    migrate.upgrade(engine)
    metrics = list(METRIC_NAMES)
    source = SourceTable.parse(settings.traces_table)
    # a given-up pair is neither pending nor in progress: no nightly run takes it
    where, params = pending_where(exclude_held=False, max_failed_runs=settings.max_runs_per_pair)
    params["metrics"] = metrics
    try:
        with engine.connect() as conn:
            results = conn.execute(
                text(
                    "SELECT metric, status, count(*), count(*) FILTER (WHERE passed), "
                    "count(*) FILTER (WHERE status = 'failed' AND failed_runs >= :n) "
                    "FROM judgeflow.eval_results GROUP BY metric, status"
                ),
                {"n": settings.max_runs_per_pair},
            ).all()
            superseded = dict(
                conn.execute(text("SELECT metric, count(*) FROM judgeflow.superseded_results GROUP BY metric")).all()
            )
            # one statement, so every figure comes from the same snapshot
            work = conn.execute(
                text(
                    f"""
                    SELECT m.metric, c.owner, c.owner IS NOT NULL AND {held("c")} AS held,
                           count(DISTINCT t.id::text), max(c.lease_expires_at)
                    FROM {source.sql} t CROSS JOIN unnest(CAST(:metrics AS text[])) AS m(metric)
                    LEFT JOIN judgeflow.claims c ON c.trace_id = t.id::text AND c.metric = m.metric
                    WHERE {where}
                    GROUP BY 1, 2, 3
                    """
                ),
                params,
            ).all()
    except DBAPIError as exc:
        raise DatabaseError(f"could not read results: {exc.orig}") from None
    out = {
        m: {"scored": 0, "passed": 0, "skipped": 0, "failed": 0, "given_up": 0, "pending": 0, "in_progress": 0,
            "stranded": 0, "superseded": superseded.get(m, 0)}
        for m in metrics
    }
    for metric, status, n, passed, given_up in results:
        out[metric][status] = n
        out[metric]["given_up"] += given_up
        if status == "scored":
            out[metric]["passed"] = passed
    runs: dict[str, dict] = {}
    for metric, owner, is_held, n, lease_until in work:
        counts = out[metric]
        if owner is not None and is_held:
            counts["in_progress"] += n
        else:
            counts["pending"] += n
            if owner is not None:
                counts["stranded"] += n
        if owner is not None:
            run = runs.setdefault(
                owner,
                {"flow_run_id": owner.split(":", 1)[0], "live": bool(is_held), "pairs": {}, "lease_expires_at": None},
            )
            run["live"] = run["live"] or bool(is_held)
            run["pairs"][metric] = run["pairs"].get(metric, 0) + n
            if run["lease_expires_at"] is None or lease_until > run["lease_expires_at"]:
                run["lease_expires_at"] = lease_until
    return {
        "metrics": out,
        "runs": [
            {**run, "lease_expires_at": run["lease_expires_at"].isoformat()}
            for run in sorted(runs.values(), key=lambda r: (not r["live"], r["flow_run_id"]))
        ],
    }


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


def estimate_backfill(settings: Settings, *, since: datetime, until: datetime, rescore: bool) -> BackfillEstimate:
    """Pairs a backfill would score and what they would cost under the run
    budget's cost model (judgeflow.judge.pricing): the judge's prices times
    the tokens the pairs' text is expected to take."""
    from judgeflow.judge.pricing import estimate_tokens, prices_for

    engine = engine_for(settings)
    migrate.upgrade(engine)
    source = SourceTable.parse(settings.traces_table)
    where, params = pending_where(
        since=since, until=until, settle_delay_s=settings.settle_delay_s,
        rescore_before=datetime.max.replace(tzinfo=since.tzinfo) if rescore else None,
    )
    params.update(metrics=list(METRIC_NAMES), cap=settings.max_field_chars)
    try:
        with engine.connect() as conn:
            select_list = source.select_list(source.columns(conn))
            sizes = conn.execute(
                text(
                    f"""
                    SELECT metric, count(*),
                           coalesce(sum(least(length(coalesce(input, '')), :cap)), 0),
                           coalesce(sum(least(length(coalesce(output, '')), :cap)), 0),
                           coalesce(sum(least(length(coalesce(context::text, '')), :cap)), 0)
                    FROM (SELECT {select_list}, m.metric
                          FROM {source.sql} t CROSS JOIN unnest(CAST(:metrics AS text[])) AS m(metric)
                          WHERE {where}) q
                    GROUP BY metric
                    """
                ),
                params,
            ).all()
            traces = conn.execute(
                text(f"SELECT count(*) FROM {source.sql} t WHERE t.created_at >= :s AND t.created_at < :u"),
                {"s": since, "u": until},
            ).scalar_one()
    except DBAPIError as exc:
        raise DatabaseError(f"could not estimate the backfill: {exc.orig}") from None
    per_metric = {m: 0 for m in METRIC_NAMES}
    prompt_tokens = completion_tokens = 0.0
    for metric, n, input_chars, output_chars, context_chars in sizes:
        per_metric[metric] = n
        # the estimate is linear in the characters, so the sums give the total
        prompt, completion = estimate_tokens(metric, input_chars=input_chars / n, output_chars=output_chars / n,
                                             context_chars=context_chars / n)
        prompt_tokens += prompt * n
        completion_tokens += completion * n
    pairs = sum(per_metric.values())
    prices = prices_for(settings)
    if prices is None:
        cost, basis = None, (f"litellm has no price for {settings.judge_model}; set "
                             "JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK and JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK")
    else:
        cost = prices.cost(prompt_tokens, completion_tokens)
        basis = (f"~{prompt_tokens / 1e6:.2f}M prompt + {completion_tokens / 1e6:.2f}M completion tokens "
                 f"estimated from the traces' text, at {prices.source}")
        if settings.reuse_identical:
            basis += "; identical traces are judged once, so repeats cost less than this"
    scored_traces = traces if rescore else min(traces, max(per_metric.values(), default=0))
    return BackfillEstimate(pairs=pairs, traces=scored_traces, per_metric=per_metric, cost_usd=cost, basis=basis)
