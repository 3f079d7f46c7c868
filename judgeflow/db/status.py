"""Read-only figures for people: results per metric, pending work, and the
estimated cost of a backfill from what past scores actually cost."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from judgeflow.db import migrate
from judgeflow.db.engine import engine_for
from judgeflow.db.judge_batches import batches_out
from judgeflow.db.pending import held
from judgeflow.errors import DatabaseError
from judgeflow.config.judge_models import judge_models
from judgeflow.config.settings import Settings
from judgeflow.metrics.registry import metric_names


def result_counts(settings: Settings) -> dict[str, dict[str, int]]:
    """Per metric: results by status (and passed), plus the pairs without a
    done result split by their claims; see :func:`work_status`."""
    return work_status(settings)["metrics"]


def dead_delivery_line(report: dict) -> str | None:
    """The line `judgeflow status` prints about dead alert deliveries (None: there are none)."""
    from judgeflow.alerts.dead_letters import DeadSummary

    dead = report.get("dead_deliveries") or {}
    latest = dead.get("latest_at")
    return DeadSummary(dead.get("count", 0), None if latest is None else datetime.fromisoformat(latest),
                       tuple(dead.get("channels", ()))).line()


def work_status(settings: Settings) -> dict:
    """What is true in the database right now, per metric:

    - ``scored``/``passed``/``skipped``/``failed``: stored results by status
      (exact: counts kept by triggers on eval_results, never a scan of it);
    - ``given_up``: of ``failed``, pairs that failed in JUDGEFLOW_MAX_RUNS_PER_PAIR
      runs, which the nightly run no longer retries (``score --retry-failed`` does);
    - ``pending``: pairs a nightly run would take now, counted exactly over
      what it reads: the source from the watermark minus the look-back, and
      failed pairs older than that (``window_start``; None: the whole source,
      no watermark yet). Rows older than the window without a result (late
      arrivals beyond the look-back) are not counted: only a backfill scores them;
    - ``in_progress``: pairs without a done result held by a live run;
    - ``stranded``: pairs without a done result claimed by a run that is gone or
      whose lease ran out (the next run takes them over at once);
    - ``superseded``: late results of runs that had lost the pair (recorded,
      never stored over the result).

    ``runs`` lists the runs holding claims: flow run, live or not, pairs per
    metric, and when their lease ends. ``dead_deliveries``: alert deliveries
    given up on (count, the latest, channels); :func:`dead_delivery_line` words it.
    ``batches_out``: the judge's batches out (judgeflow/db/judge_batches.py)."""
    from judgeflow.db.pairs import Done
    from judgeflow.db.pending_work import count_plan_pending
    from judgeflow.sources.results import adopt_configured_source
    from judgeflow.sources.trace_source import source_engine, trace_source

    engine = engine_for(settings)
    migrate.upgrade(engine)
    sourced = adopt_configured_source(engine, settings)
    source = trace_source(settings)
    # a given-up pair is neither pending nor in progress: no nightly run takes it
    # ... and a trace a sample budget did not select is not pending either (counted as not sampled)
    done = Done(max_failed_runs=settings.max_runs_per_pair, not_sampled_done=True)
    try:
        with engine.connect() as conn:
            read = _read_figures(conn, settings, sourced.source, done)
        pending = count_plan_pending(source, source_engine(settings), engine, read["plan"], list(metric_names()),
                                     done=done)
    except DBAPIError as exc:
        raise DatabaseError(f"could not read results: {exc.orig}") from None
    plan = read["plan"]
    out, runs = _per_metric(read["results"], read["claims"], read["superseded"], pending)
    return {
        "metrics": out,
        "no_longer_scored": no_longer_scored(read["results"]),
        "dead_deliveries": read["dead"].as_json(),
        "source": sourced.source,
        "other_sources": sourced.others,
        "source_notes": sourced.notes(),
        "skipped_by_preset": read["preset_skips"],
        "phoenix_write_back": read["write_back"],
        "not_sampled": read["not_sampled"],
        "rates": read["rates"],
        "window_start": None if plan.lo is None else plan.lo.isoformat(),
        "watermarks": {m: None if w is None else w.isoformat() for m, w in plan.watermarks.items()},
        "runs": runs,
        "judge_models": judge_models(settings),  # the model that judges each metric now
        "batches_out": [asdict(batch) for batch in batches_out(settings)],
    }


def _read_figures(conn, settings: Settings, source: str, done) -> dict:
    """Everything `status` reads in one connection (the pending count aside)."""
    from judgeflow.alerts.dead_letters import dead_summary
    from judgeflow.db.result_counts import result_counts
    from judgeflow.sources.trace_source import trace_source
    from judgeflow.db.watermark import plan_reads
    from judgeflow.sampling.decisions import not_sampled_waiting

    cond, params = done.sql()
    claims = conn.execute(
        text(
            f"""
            SELECT c.metric, c.owner, {held("c")} AS held, count(*), max(c.lease_expires_at)
            FROM judgeflow.claims c
            WHERE NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r
                              WHERE r.trace_id = c.trace_id AND r.metric = c.metric AND {cond})
            GROUP BY 1, 2, 3
            """
        ),
        params,
    ).all()
    return {
        "results": result_counts(conn, given_up_after=settings.max_runs_per_pair, source=source),
        "preset_skips": _preset_skips(conn, source),
        "write_back": _write_back_counts(conn, settings, source),
        "superseded": dict(
            conn.execute(text("SELECT metric, count(*) FROM judgeflow.superseded_results GROUP BY metric")).all()
        ),
        "claims": claims,
        "plan": plan_reads(conn, trace_source(settings), list(metric_names()), lookback_s=settings.source_lookback_s),
        "dead": dead_summary(conn, source),
        "not_sampled": not_sampled_waiting(conn),
        "rates": window_rates(conn, settings),
    }


def _per_metric(results, claims, superseded: dict, pending: dict) -> tuple[dict, list[dict]]:
    """The per-metric figures and the runs holding claims, from what was read."""
    out = {
        m: {"scored": 0, "passed": 0, "skipped": 0, "failed": 0, "given_up": 0, "pending": pending.get(m, 0),
            "in_progress": 0, "stranded": 0, "superseded": superseded.get(m, 0)}
        for m in metric_names()
    }
    for metric, status, n, passed, given_up in results:
        if metric not in out:
            continue  # no longer served: no_longer_scored() counts its results
        out[metric][status] = n
        out[metric]["given_up"] += given_up
        if status == "scored":
            out[metric]["passed"] = passed
    runs: dict[str, dict] = {}
    for metric, owner, is_held, n, lease_until in claims:
        if metric in out:
            out[metric]["in_progress" if is_held else "stranded"] += n
        run = runs.setdefault(
            owner,
            {"flow_run_id": owner.split(":", 1)[0], "live": bool(is_held), "pairs": {}, "lease_expires_at": None},
        )
        run["live"] = run["live"] or bool(is_held)
        run["pairs"][metric] = run["pairs"].get(metric, 0) + n
        if run["lease_expires_at"] is None or lease_until > run["lease_expires_at"]:
            run["lease_expires_at"] = lease_until
    ordered = [
        {**run, "lease_expires_at": run["lease_expires_at"].isoformat()}
        for run in sorted(runs.values(), key=lambda r: (not r["live"], r["flow_run_id"]))
    ]
    return out, ordered


def no_longer_scored(results) -> dict[str, int]:
    """Results kept of metrics no longer served (removed from the metrics file, a plugin uninstalled)."""
    served = set(metric_names())
    out: dict[str, int] = {}
    for metric, _status, n, _passed, _given_up in results:
        if metric not in served:
            out[metric] = out.get(metric, 0) + n
    return out


_PRESET_SKIPS = text(
    "SELECT metric, reason, count(*) FROM judgeflow.eval_results "
    "WHERE source = :source AND status = 'skipped' AND (details ->> 'skipped_by_source') = 'true' "
    "GROUP BY 1, 2 ORDER BY 3 DESC, 2"
)


def _preset_skips(conn, source: str) -> dict[str, dict[str, int]]:
    """Per metric, the skipped results the source preset decided (no judge asked), by reason."""
    out: dict[str, dict[str, int]] = {}
    for metric, reason, n in conn.execute(_PRESET_SKIPS, {"source": source}).all():
        out.setdefault(metric, {})[reason or "no reason given"] = int(n)
    return out


def _write_back_counts(conn, settings: Settings, source: str) -> dict[str, int | bool] | None:
    """The Phoenix write-back's outbox for a Phoenix source (None for other sources)."""
    if settings.source != "phoenix":
        return None
    from judgeflow.phoenix.outbox import unwritten_counts

    return {"on": settings.phoenix_write_back, **unwritten_counts(conn, source)}


def status_notes(report: dict) -> list[str]:
    """`judgeflow status`'s lines about the source, its preset's skips and the Phoenix write-back."""
    lines = [f"source: {report['source']} (status counts only its results)", *report["source_notes"]]
    preset = report["source"].split(":", 1)[0]
    by_model: dict[str, list[str]] = {}
    for metric, model in report.get("judge_models", {}).items():
        by_model.setdefault(model, []).append(metric)
    if len(by_model) > 1:  # a metric judged by a model of its own
        lines.append("judged by: " + "; ".join(f"{model} ({', '.join(ms)})" for model, ms in by_model.items()))
    for metric, n in report.get("no_longer_scored", {}).items():
        lines.append(f"{metric}: no longer scored (not a served metric: removed from JUDGEFLOW_METRICS_FILE, or its "
                     f"plugin is gone); its {n} stored result(s) are kept")
    for metric, reasons in report["skipped_by_preset"].items():
        total = sum(reasons.values())
        why = "; ".join(f"{n}: {reason}" for reason, n in list(reasons.items())[:5])
        more = f"; and {len(reasons) - 5} other reason(s)" if len(reasons) > 5 else ""
        lines.append(f"{metric}: {total} of the skipped were skipped by the {preset} preset (no judge asked, "
                     f"no cost): {why}{more}")
    lines.extend(_batch_lines(report.get("batches_out") or []))
    wb = report.get("phoenix_write_back")
    if wb is not None:
        state = "on" if wb["on"] else "off (JUDGEFLOW_PHOENIX_WRITE_BACK)"
        lines.append(f"Phoenix write-back {state}: {wb['unwritten']} scored result(s) not yet written to Phoenix"
                     + (f" ({wb['waiting']} waiting for their next try, {wb['given_up']} given up: runs no longer "
                        "try those)" if wb["waiting"] or wb["given_up"] else "")
                     + ("; `judgeflow phoenix sync` writes them now" if wb["unwritten"] else ""))
        if wb["unwritten"] and wb.get("last_error"):
            lines.append(f"Phoenix write-back's last error: {wb['last_error']}")
    return lines


def _batch_lines(batches: list[dict]) -> list[str]:
    """The judge's batches still out: each with its age; the next batch run collects them."""
    if not batches:
        return []
    lines = [f"judge batches out: {len(batches)} (`judgeflow score --batch` collects them; nothing is sent twice)"]
    for b in batches:
        age = b["age_s"]
        shown = f"{age / 3600:.1f}h" if age >= 3600 else f"{age / 60:.0f}m" if age >= 60 else f"{age:.0f}s"
        lines.append(f"  {b['batch_id']}: {b['status']}, round {b['round']}, {b['lines']} line(s) of {b['model']}, "
                     f"out for {shown}")
    return lines


def window_rates(conn, settings: Settings) -> dict[str, dict]:
    """Per metric, its not-passed rate over the alert window: a weighted
    estimate with its 95% interval, the results judged and the traffic they stand for."""
    from judgeflow.alerts.evaluation import read_evaluation_counts
    from judgeflow.alerts.rules import all_rules

    out = {}
    rules = [r for r in all_rules(settings) if r.kind == "regression" and r.metric is not None]
    # every metric's rate from one read of the result rollup
    counts = read_evaluation_counts(conn, rules, now=conn.execute(text("SELECT now()")).scalar_one())
    for rule in rules:
        e = counts.figures(rule)[0].estimate
        out[rule.metric] = {"window": settings.alert_window, "rate": e.rate, "ci_low": e.ci_low,
                            "ci_high": e.ci_high, "judged": e.judged, "traces": round(e.traces)}
    return out


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


def _estimated_tokens(counts: dict[str, int], bodies: list, cap: int
                      ) -> tuple[dict[str, int], dict[str, tuple[float, float]]]:
    """Per metric, the pairs to score and the prompt and completion tokens they
    are expected to take, from the mean size of the sampled ``bodies``."""
    from judgeflow.metrics.cost import estimate_tokens

    chars = {
        "input": _mean(min(len(b.input or ""), cap) for b in bodies),
        "output": _mean(min(len(b.output or ""), cap) for b in bodies),
        "context": _mean(min(len("" if b.context is None else json.dumps(b.context)), cap) for b in bodies),
    }
    per_metric = {m: 0 for m in metric_names()}
    tokens: dict[str, tuple[float, float]] = {}
    for metric in metric_names():
        n = counts.get(metric, 0)
        if not n:
            continue
        per_metric[metric] = n
        # the estimate is linear in the characters, so the per-pair mean times n gives the total
        prompt, completion = estimate_tokens(metric, input_chars=chars["input"], output_chars=chars["output"],
                                             context_chars=chars["context"])
        tokens[metric] = (prompt * n, completion * n)
    return per_metric, tokens


def estimate_backfill(settings: Settings, *, since: datetime, until: datetime, rescore: bool) -> BackfillEstimate:
    """Pairs a backfill would score and what they would cost under the run
    budget's cost model (judgeflow.judge.pricing): the judge's prices times
    the tokens the pairs' text is expected to take."""
    from judgeflow.judge.pricing import prices_for, unpriced_model

    from judgeflow.db.pairs import Done, key_pages
    from judgeflow.db.pending_work import count_plan_pending
    from judgeflow.sources.trace_source import KeyFilter, read_bodies, source_engine, trace_source
    from judgeflow.db.watermark import plan_reads

    engine = engine_for(settings)
    migrate.upgrade(engine)
    source = trace_source(settings)
    reader = source_engine(settings)
    metrics = list(metric_names())
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
    per_metric, tokens = _estimated_tokens(counts, bodies, cap)
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
