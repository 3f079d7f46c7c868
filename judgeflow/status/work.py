"""`judgeflow status`'s figures: what is true in the database right now, per
metric, and around it (the source, its preset's skips, the Phoenix write-back,
the sample, the alert window's rates, the judge's batches out).

A session metric's figures (``units``: ``sessions``) count sessions, each by its latest score; a trace
metric's session rate is computed from its turns, never judged: never pending, in progress or stranded,
and listed once something was computed for it."""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from judgeflow.db import migrate
from judgeflow.db.engine import engine_for, source_engine
from judgeflow.db.judge_batches import batches_out
from judgeflow.db.work_counts import open_claims, preset_skips, superseded_counts
from judgeflow.errors import DatabaseError
from judgeflow.config.judge_models import judge_models
from judgeflow.config.settings import Settings
from judgeflow.metrics.registry import metric_names, reported, reported_names, trace_metric_names, unit_of


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
    given up on (count, the latest, channels); judgeflow/status/notes.py words it.
    ``batches_out``: the judge's batches out (judgeflow/db/judge_batches.py)."""
    from judgeflow.db.result_sources import adopt_configured_source

    engine = engine_for(settings)
    migrate.upgrade(engine)
    sourced = adopt_configured_source(engine, settings)
    read, pending = _read_all(settings, engine, sourced.source)
    plan = read["plan"]
    out, runs = _per_metric(read["results"], read["claims"], read["superseded"], pending)
    return {
        "metrics": out,
        "units": {metric: unit_of(metric) for metric in out}, "no_longer_scored": no_longer_scored(read["results"]),
        "dead_deliveries": read["dead"].as_json(),
        "source": sourced.source,
        "other_sources": sourced.others,
        "source_notes": sourced.notes(),
        "skipped_by_preset": read["preset_skips"],
        "phoenix_write_back": read["write_back"],
        "not_sampled": read["not_sampled"],
        # sessions with turns no judging saw: quiet (the next run judges them) or still open
        "sessions_waiting": {**read["sessions_waiting"], "idle": settings.session_idle},
        "rates": read["rates"],
        "window_start": None if plan.lo is None else plan.lo.isoformat(),
        "watermarks": {m: None if w is None else w.isoformat() for m, w in plan.watermarks.items()},
        "runs": runs,
        "judge_models": judge_models(settings),  # the model that judges each metric now
        "batches_out": [asdict(batch) for batch in batches_out(settings)],
    }


def _read_all(settings: Settings, engine, source: str) -> tuple[dict, dict]:
    """The figures of :func:`_read_figures` and the pending count, a database error in one line."""
    from judgeflow.db.pairs import Done
    from judgeflow.db.pending_work import count_plan_pending
    from judgeflow.sources.trace_source import trace_source

    # a given-up pair is neither pending nor in progress: no nightly run takes it
    # ... and a trace a sample budget did not select is not pending either (counted as not sampled)
    done = Done(max_failed_runs=settings.max_runs_per_pair, not_sampled_done=True)
    try:
        with engine.connect() as conn:
            read = _read_figures(conn, settings, source, done)
        pending = count_plan_pending(trace_source(settings), source_engine(settings), engine, read["plan"],
                                     trace_metric_names(), done=done)
    except DBAPIError as exc:
        raise DatabaseError(f"could not read results: {_first_line(exc.orig)}") from None
    return read, pending


def _read_figures(conn, settings: Settings, source: str, done) -> dict:
    """Everything `status` reads in one connection (the pending count aside)."""
    from judgeflow.alerts.dead_letters import dead_summary
    from judgeflow.db.result_counts import result_counts
    from judgeflow.db.sessions import sessions_waiting
    from judgeflow.sources.trace_source import trace_source
    from judgeflow.db.watermark import plan_reads
    from judgeflow.sampling.decisions import not_sampled_waiting

    return {
        "results": result_counts(conn, given_up_after=settings.max_runs_per_pair, source=source),
        "preset_skips": preset_skips(conn, source),
        "write_back": _write_back_counts(conn, settings, source),
        "superseded": superseded_counts(conn),
        "claims": open_claims(conn, done),
        "plan": plan_reads(conn, trace_source(settings), trace_metric_names(), lookback_s=settings.source_lookback_s),
        "dead": dead_summary(conn, source),
        "not_sampled": not_sampled_waiting(conn),
        "sessions_waiting": sessions_waiting(conn, source, settings.session_idle_s),
        "rates": window_rates(conn, settings),
    }


def _per_metric(results, claims, superseded: dict, pending: dict) -> tuple[dict, list[dict]]:
    """The per-metric figures and the runs holding claims, from what was read."""
    out = {
        m: {"scored": 0, "passed": 0, "skipped": 0, "failed": 0, "given_up": 0, "pending": pending.get(m, 0),
            "in_progress": 0, "stranded": 0, "superseded": superseded.get(m, 0)}
        for m in reported_names()  # each trace metric's session rate too (never pending: computed, not judged)
    }
    for metric, status, n, passed, given_up in results:
        if metric not in out:
            continue  # no longer served: no_longer_scored() counts its results
        out[metric][status] = n
        out[metric]["given_up"] += given_up
        if status == "scored":
            out[metric]["passed"] = passed
    # a session rate nothing was computed for yet is left out: no row of zeros per trace metric
    out = {m: row for m, row in out.items() if m not in _rates() or any(row.values())}
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


def _rates() -> set[str]:
    """The session rates of the trace metrics served (computed from their turns, never judged)."""
    return {name for name, spec in reported().items() if spec.rate_of is not None}


def _first_line(error: BaseException) -> str:
    """PostgreSQL's first line says what is wrong; the rest quotes the SQL and points a caret at it."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def no_longer_scored(results) -> dict[str, int]:
    """Results kept of metrics no longer served (removed from the metrics file, a plugin uninstalled)."""
    served = set(reported_names())
    out: dict[str, int] = {}
    for metric, _status, n, _passed, _given_up in results:
        if metric not in served:
            out[metric] = out.get(metric, 0) + n
    return out


def _write_back_counts(conn, settings: Settings, source: str) -> dict[str, int | bool] | None:
    """The Phoenix write-back's outbox for a Phoenix source (None for other sources)."""
    if settings.source != "phoenix":
        return None
    from judgeflow.phoenix.outbox import unwritten_counts

    counts = unwritten_counts(conn, source)
    # given_up: the name `gone` had until 2026-11-29, kept for scripts reading `status --json` (deprecated)
    return {"on": settings.phoenix_write_back, **counts, "given_up": counts["gone"]}


def window_rates(conn, settings: Settings) -> dict[str, dict]:
    """Per metric, its not-passed rate over the alert window: a weighted
    estimate with its 95% interval, the results judged and the traffic they stand for; and
    the same rate corrected for the judge's error on people's labels (null with a note why)."""
    from judgeflow.alerts.evaluation import read_evaluation_counts
    from judgeflow.alerts.rules import all_rules

    out = {}
    rules = [r for r in all_rules(settings) if r.kind == "regression" and r.metric is not None]
    # every metric's rate from one read of the result rollup
    counts = read_evaluation_counts(conn, rules, now=conn.execute(text("SELECT now()")).scalar_one(),
                                    corrected=True)
    for rule in rules:
        figures = counts.figures(rule)[0]
        e, c = figures.estimate, figures.corrected
        if rule.metric in _rates() and not e.judged:
            continue  # a session rate with nothing in the window: no line per trace metric
        unit = unit_of(rule.metric)  # the traffic a session metric's results stand for is sessions
        out[rule.metric] = {"window": settings.alert_window, "rate": e.rate, "ci_low": e.ci_low,
                            "ci_high": e.ci_high, "judged": e.judged, "unit": unit, unit: round(e.traces),
                            # the rate corrected for the judge's error (judgeflow/alerts/corrected.py)
                            "corrected_rate": c.rate, "corrected_ci_low": c.ci_low, "corrected_ci_high": c.ci_high,
                            "labels": c.labels if c.rate is not None else None,
                            "corrected_note": c.reason}
    return out


