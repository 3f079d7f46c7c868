"""The judgeflow command line. Every command reads the settings once and
passes them down; errors from judgeflow are printed as one clear line."""

from __future__ import annotations

import os

ENVIRONMENT_DEFAULTS = {
    # before litellm or prefect are imported anywhere: no network at import, no
    # analytics, and judgeflow's own log lines shown in the Prefect UI
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "judgeflow",
    # judgeflow's log lines outside a flow run (alerts check, status) are not run logs
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
}


def apply_environment_defaults() -> None:
    for name, value in ENVIRONMENT_DEFAULTS.items():
        os.environ.setdefault(name, value)


apply_environment_defaults()

import atexit
import gc
import sys
from typing import Optional

import typer

from judgeflow.cli_errors import clear_errors

# Registered first, so it runs last: with Prefect and SQLAlchemy loaded, the
# interpreter's final garbage collection walks a large heap after the run has
# printed its summary (docs/benchmark.md). Freezing the heap skips that walk;
# every library's own exit handler has run by then.
atexit.register(gc.freeze)

# Set by main(): judgeflow's command is the program, so the process's garbage
# collector is judgeflow's to tune (judgeflow/heap.py). Not when another
# program calls `app` in its own process (a test's CliRunner): its heap is its own.
_OWNS_PROCESS = False

app = typer.Typer(help="judgeflow: LLM-as-a-judge scoring of production traces.", no_args_is_help=True)
db_app = typer.Typer(help="judgeflow's database: migrations, checks, the embedded server.", no_args_is_help=True)
app.add_typer(db_app, name="db")


def _mount_alerts() -> None:
    from judgeflow.alerts.cli import alerts_app

    app.add_typer(alerts_app, name="alerts", help="Alert rules: current state, history, evaluate now.")


_mount_alerts()


def _settings():
    from judgeflow.settings import load_settings

    return load_settings()


def _use_prefect(settings):
    """Before a command's first Prefect call: the configured Prefect server
    (PREFECT_API_URL), else judgeflow's local one, started on first use."""
    from judgeflow.prefect_server import use_prefect

    url, local, started = use_prefect(settings)
    if local is not None:
        how = "started" if started else "running"
        typer.echo(f"prefect (local, {how}): {local.ui_url}  (`judgeflow stop` stops it)", err=True)
    return url, local


@app.command()
def version() -> None:
    """Print judgeflow's version."""
    from judgeflow import __version__

    typer.echo(__version__)


@app.command()
@clear_errors
def score(
    limit: Optional[int] = typer.Option(None, help="score at most this many traces"),
    since: Optional[str] = typer.Option(None, help="only traces created at/after this (ISO time or e.g. 7d)"),
    until: Optional[str] = typer.Option(None, help="only traces created before this"),
    batch_size: Optional[int] = typer.Option(
        None, help="(trace, metric) pairs claimed per batch (default: 8 per judge call in flight, at least 100)"
    ),
    sample_rate: float = typer.Option(1.0, help="score this deterministic share of traces"),
    max_concurrency: Optional[int] = typer.Option(None, help="judge calls in flight (default JUDGEFLOW_MAX_CONCURRENCY)"),
    alerts: bool = typer.Option(True, help="evaluate alert rules after scoring"),
    fanout: str = typer.Option(
        "batch", help="'batch': a Prefect task per claimed batch, pairs retried in it (default; ~10x faster, "
        "2 task runs per batch); 'pair': a Prefect task per (trace, metric)"
    ),
    judge_processes: Optional[int] = typer.Option(
        None, help="worker processes making judge calls (default JUDGEFLOW_JUDGE_PROCESSES, else one per core, "
        "at most 4; 1: in this process)"
    ),
    settle_delay: Optional[str] = typer.Option(
        None, help="only score traces older than this, e.g. 10m (default JUDGEFLOW_SETTLE_DELAY, else 0)"
    ),
    budget_usd: Optional[float] = typer.Option(
        None, help="stop claiming once spent + in-flight judge cost reaches this many USD; the rest stays pending "
        "(default JUDGEFLOW_RUN_BUDGET_USD)"
    ),
    retry_failed: bool = typer.Option(
        False, "--retry-failed",
        help="also retry pairs given up after failing in JUDGEFLOW_MAX_RUNS_PER_PAIR runs",
    ),
    sample_budget_usd: Optional[float] = typer.Option(
        None, help="judge a stratified sample of the new traces that fits this many USD when judging all would "
        "cost more; the rest is recorded as not sampled (default JUDGEFLOW_SAMPLE_BUDGET_USD)"
    ),
    plan: bool = typer.Option(
        False, "--plan", help="print the sample plan per stratum (traffic, traces to judge, cost, smallest rise "
        "detected) and exit: no judge call, nothing recorded"
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="print every log line (each batch, each task run), not only warnings and errors"
    ),
) -> None:
    """Score every trace without a result, once, now. Ctrl-C stops it: calls in flight finish, exit code 130."""
    _quiet_unless(verbose)
    from judgeflow.timeparse import parse_when

    settings = _settings()
    if sample_budget_usd is not None:
        settings = settings.model_copy(update={"sample_budget_usd": sample_budget_usd})
    if settings.sample_budget_usd is not None or plan:
        from judgeflow.judge.pricing import require_prices

        require_prices(settings, why="a sample budget is set" if settings.sample_budget_usd else "--plan prices traces")
    if plan:
        from judgeflow.sampling.command import plan_text_now

        _announce_database(settings)
        typer.echo(plan_text_now(settings, since=parse_when(since), until=parse_when(until), sample_rate=sample_rate))
        return
    if budget_usd is not None or settings.run_budget_usd is not None:
        # refused here, before Prefect starts, rather than as a failed flow run
        from judgeflow.judge.pricing import require_prices

        require_prices(settings, why="a run budget is set")
    _announce_database(settings)
    if _nothing_pending(settings, since=parse_when(since), until=parse_when(until), sample_rate=sample_rate):
        from judgeflow.db.trace_source import trace_source

        typer.echo(f"nothing to score: no (trace, metric) pair is pending in {trace_source(settings).display}; "
                   "no flow run was started")
        if alerts:
            _evaluate_alerts_now(settings)
        return
    _start_judge_early(settings, max_concurrency=max_concurrency, judge_processes=judge_processes)
    from judgeflow.flows.scoring import score_new_traces

    _use_prefect(settings)
    summary = _watched("score", settings, lambda: score_new_traces(
        batch_size=batch_size, limit=limit, since=parse_when(since), until=parse_when(until),
        sample_rate=sample_rate, max_concurrency=max_concurrency, evaluate_alerts=alerts, fanout=fanout,
        judge_processes=judge_processes, settle_delay=settle_delay, budget_usd=budget_usd,
        retry_failed=retry_failed, sample_budget_usd=sample_budget_usd,
    ))
    typer.echo(summary.markdown())
    _exit_if_stopped(summary)


def _quiet_unless(verbose: bool) -> None:
    """Warnings and errors only on the terminal unless -v; before Prefect is imported."""
    from judgeflow.run_console import set_log_level

    set_log_level(verbose)


def _watched(title: str, settings, run):
    """``run()``, the flow run it starts shown on the terminal and stopped by Ctrl-C (judgeflow/run_console.py)."""
    from judgeflow.heap import settle_heap
    from judgeflow.prefect_server import ui_url_without_import
    from judgeflow.run_console import EXIT_STOPPED, watched_run

    if _OWNS_PROCESS:  # the flow and its libraries are imported: the run's collections skip them
        settle_heap()
    try:
        with watched_run(title, ui_url=ui_url_without_import(settings)):
            return run()
    except KeyboardInterrupt:  # a second Ctrl-C: quit now
        typer.echo("quit: judge calls in flight are lost; the next run takes this run's claims over", err=True)
        raise typer.Exit(EXIT_STOPPED) from None


def _exit_if_stopped(summary) -> None:
    from judgeflow.run_console import EXIT_STOPPED

    if summary.stopped:
        raise typer.Exit(EXIT_STOPPED)


def _start_judge_early(settings, *, max_concurrency, judge_processes) -> None:
    """Start the run's judge worker processes before Prefect is imported and the
    flow run created: their litellm import (seconds) then runs beside that on
    another core instead of delaying the first judge call. The flow finds the same
    cached judge. Any error is left for the flow's start-judge task to report."""
    from judgeflow.judge.factory import build_started_judge, is_offline_model, judge_process_count
    from judgeflow.settings import run_settings

    if is_offline_model(settings.judge_model):
        return

    try:
        judge_settings = run_settings(max_concurrency=max_concurrency, judge_processes=judge_processes)
        if judge_process_count(judge_settings) > 1:  # in-process: litellm is imported by the run itself
            build_started_judge(judge_settings)
    except Exception:  # noqa: BLE001 - reported by the run, with its context
        return


def _nothing_pending(settings, *, since, until, sample_rate: float) -> bool:
    """True only when no (trace, metric) pair is pending (the flow's own
    definition, before its settle delay, which can only exclude more): then
    `judgeflow score` starts no flow run and imports neither the flows nor
    litellm. Any doubt (no schema yet, an error) means "run the flow"."""
    from sqlalchemy.exc import SQLAlchemyError

    from judgeflow.db.engine import engine_for
    from judgeflow.db.pairs import Done
    from judgeflow.db.pending_work import count_plan_pending
    from judgeflow.db.trace_source import source_engine, trace_source
    from judgeflow.db.watermark import plan_reads
    from judgeflow.errors import JudgeflowError
    from judgeflow.tasks.work import METRIC_NAMES

    metrics = list(METRIC_NAMES)
    try:
        source, engine = trace_source(settings), engine_for(settings)
        with engine.connect() as conn:
            # what the run would read: from the watermark, or the --since/--until range
            plan = plan_reads(conn, source, metrics, lookback_s=settings.source_lookback_s, sample_rate=sample_rate,
                              ranged=since is not None or until is not None)
        # a nightly run leaves traces a sample budget did not select to backfills
        done = Done(not_sampled_done=since is None and until is None)
        counts = count_plan_pending(source, source_engine(settings), engine, plan, metrics, done=done,
                                    since=since, until=until, sample_rate=sample_rate, limit_pairs=1)
    except (SQLAlchemyError, JudgeflowError):
        return False
    return sum(counts.values()) == 0


def _evaluate_alerts_now(settings) -> None:
    """The alert rules, evaluated as a scoring run would evaluate them at its end."""
    from judgeflow.alerts.cli import _flush_prefect_events
    from judgeflow.alerts.service import evaluate_rules, render_markdown
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for

    _use_prefect(settings)  # the alert events go to the same Prefect server as the runs' do
    engine = engine_for(settings)
    migrate.upgrade(engine)
    evaluations = evaluate_rules(settings, engine=engine)
    _flush_prefect_events()
    typer.echo(render_markdown(evaluations))


@app.command()
@clear_errors
def backfill(
    since: str = typer.Option(..., help="start of the range (ISO time or e.g. 30d)"),
    until: str = typer.Option(..., help="end of the range, exclusive (ISO time or e.g. 0s for now)"),
    rescore: bool = typer.Option(False, help="also re-score traces that already have a result"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    batch_size: Optional[int] = typer.Option(
        None, help="pairs claimed per batch (default: 8 per judge call in flight, at least 100)"
    ),
    max_concurrency: Optional[int] = typer.Option(None),
    fanout: str = typer.Option("batch", help="'batch' or 'pair' (see `judgeflow score --help`)"),
    judge_processes: Optional[int] = typer.Option(None, help="see `judgeflow score --help`"),
    budget_usd: Optional[float] = typer.Option(None, help="see `judgeflow score --help`"),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="print every log line (each batch, each task run), not only warnings and errors"
    ),
) -> None:
    """Score (or with --rescore, re-score) every trace in a time range."""
    _quiet_unless(verbose)

    from judgeflow.db.status import estimate_backfill
    from judgeflow.timeparse import parse_when

    settings = _settings()
    start, end = parse_when(since), parse_when(until)
    if start >= end:
        raise typer.BadParameter("--since must be before --until")
    estimate = estimate_backfill(settings, since=start, until=end, rescore=rescore)
    typer.echo(estimate.describe())
    if estimate.pairs == 0:
        return
    if not yes and not typer.confirm("Start the backfill?", default=False):
        typer.echo("aborted; nothing was scored")
        raise typer.Exit(1)
    _start_judge_early(settings, max_concurrency=max_concurrency, judge_processes=judge_processes)
    from judgeflow.flows.backfill import backfill_traces

    _use_prefect(settings)
    summary = _watched("backfill", settings, lambda: backfill_traces(
        since=start, until=end, rescore=rescore, batch_size=batch_size, max_concurrency=max_concurrency,
        fanout=fanout, judge_processes=judge_processes, budget_usd=budget_usd))
    typer.echo(summary.markdown())
    _exit_if_stopped(summary)


@app.command()
@clear_errors
def shadow(
    judge_model: Optional[str] = typer.Option(
        None, "--judge-model", help="the candidate judge (a litellm model string, or offline); default: the "
        "configured judge, to compare the metric code as it is now (edited prompts) with the results in force"
    ),
    judge_api_base: Optional[str] = typer.Option(None, "--judge-api-base", help="the candidate's API base"),
    size: int = typer.Option(50, "--size", min=1, help="pairs per segment (a segment with fewer gives all it has)"),
    segment_by: Optional[str] = typer.Option(
        None, "--segment-by", help="metadata key to stratify by (default: the first JUDGEFLOW_ALERT_SEGMENT_BY "
        "key; '' for none)"
    ),
    since: str = typer.Option("7d", help="sample traces created since this (ISO time or e.g. 7d)"),
    metric: Optional[list[str]] = typer.Option(None, "--metric", help="toxicity and/or hallucination (default both)"),
    seed: str = typer.Option("judgeflow-shadow", help="picks the sample: the same seed, the same traces"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="print every log line, not only warnings and errors"
    ),
) -> None:
    """Score a stratified sample of recent traces with a candidate judge beside the judge in force and
    report how far they agree (kappa, failing rates per segment, cost). Writes only judgeflow.shadow_results."""
    _quiet_unless(verbose)
    from judgeflow.shadow.command import run_shadow

    run_shadow(judge_model=judge_model, judge_api_base=judge_api_base, size=size, segment_by=segment_by,
               since=since, metrics=metric, seed=seed, yes=yes, as_json=as_json, use_prefect=_use_prefect)


@app.command()
@clear_errors
def calibrate(
    path: Optional[str] = typer.Argument(
        None, metavar="FILE.jsonl", help="labelled set: one JSON object per line with input, output, context, labels"
    ),
    sample: bool = typer.Option(False, "--sample", help="use the labelled set shipped with judgeflow"),
    prefect: bool = typer.Option(
        False, "--prefect", help="run as the calibrate-judge flow and publish the report as Prefect artifacts"
    ),
) -> None:
    """Run the configured judge over human-labelled traces and report how well it agrees:
    Cohen's kappa, precision/recall/F1 at the configured thresholds, and the threshold
    that would agree best."""
    from judgeflow.calibration import SAMPLE_PATH, load_labelled, render

    if (path is None) == (not sample):
        raise typer.BadParameter("give FILE.jsonl or --sample (not both)")
    path = str(SAMPLE_PATH) if sample else path
    settings = _settings()
    if prefect:
        from judgeflow.flows.calibration import calibrate_judge

        typer.echo(calibrate_judge(path))
        return
    from judgeflow.tasks.calibration import judge_labelled

    items = load_labelled(path)
    typer.echo(render(judge_labelled(settings, items), judge_model=settings.judge_model, source=path))


@app.command()
@clear_errors
def serve(
    timezone: Optional[str] = typer.Option(
        None, help="IANA timezone of the 02:00 schedule (default JUDGEFLOW_SCHEDULE_TIMEZONE, else UTC)"
    ),
    limit: Optional[int] = typer.Option(None, help="at most this many flow runs at once in this process"),
) -> None:
    """Run the nightly schedule (02:00) and the on-demand backfill in this process, without a work pool."""
    from judgeflow.serve import serve as serve_deployments

    settings = _settings()
    _announce_database(settings)
    _use_prefect(settings)
    serve_deployments(settings, timezone=timezone, limit=limit)


@app.command()
@clear_errors
def status(
    as_json: bool = typer.Option(False, "--json", help="print the figures as JSON"),
) -> None:
    """Results per metric and status, what is pending, and what live runs are scoring now."""
    import json

    from judgeflow.db.status import work_status

    settings = _settings()
    _announce_database(settings)
    report = work_status(settings)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    columns = list(dict.fromkeys(k for row in report["metrics"].values() for k in row))  # every figure, in order
    header = f"{'metric':<15}" + "".join(f"{c.replace('_', ' '):>13}" for c in columns)
    typer.echo(header)
    for metric, row in report["metrics"].items():
        typer.echo(f"{metric:<15}" + "".join(f"{row.get(c, 0):>13}" for c in columns))
    window = report.get("window_start")
    typer.echo(
        "scored/passed/skipped/failed/given up: exact (counts kept by triggers on judgeflow.eval_results). "
        "pending: exact count of the pairs without a done result that no live run holds, in what the next "
        "nightly run reads: "
        + ("the whole source (no watermark yet)" if window is None else
           f"traces created since {window} (the watermark minus JUDGEFLOW_SOURCE_LOOKBACK) and failed pairs "
           "older than that; older traces without a result are not counted (`judgeflow backfill` scores them)")
        + ". in progress / stranded: claims held by a live run / by a run that is gone or stopped renewing its "
        "lease (the next run takes those over at once)"
    )
    for metric, r in report.get("rates", {}).items():
        typer.echo(_rate_line(metric, r))
    if report.get("not_sampled"):
        typer.echo(f"{report['not_sampled']:,} traces not sampled under the budget (not pending; "
                   "`judgeflow backfill` can still judge them)")
    for run in report["runs"]:
        pairs = ", ".join(f"{m} {n}" for m, n in run["pairs"].items())
        state = f"in progress, lease until {run['lease_expires_at']}" if run["live"] else "stranded (run is gone)"
        typer.echo(f"flow run {run['flow_run_id']}: {pairs} ({state})")


def _rate_line(metric: str, r: dict) -> str:
    if r["rate"] is None:
        return f"{metric} not-passed rate, last {r['window']}: no judged results"
    return (f"{metric} not-passed rate, last {r['window']}: {r['rate']:.1%} (95% CI {r['ci_low']:.1%}-"
            f"{r['ci_high']:.1%}; {r['judged']:,} judged of ~{r['traces']:,} traces)")


@app.command()
@clear_errors
def report(
    since: str = typer.Option("14d", help="how far back the per-day rates go, e.g. 14d or 4w"),
    segment: Optional[list[str]] = typer.Option(
        None, "--segment", help="a metadata key to break the rates down by (default JUDGEFLOW_ALERT_SEGMENT_BY)"
    ),
    as_json: bool = typer.Option(
        False, "--json", help="print one JSON object: the alert window's rows and per-day rows"
    ),
) -> None:
    """Per-day not-passed rates per metric, overall and for the top segments, with
    the change of the current window against its baseline (the trend artifact, in the terminal)."""
    import math

    from judgeflow.alerts.trend import compute_trend, render_text
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.settings import parse_duration

    settings = _settings()
    _announce_database(settings)
    days = max(1, math.ceil(parse_duration(since) / 86400))
    keys = tuple(k.strip() for s in segment for k in s.split(",") if k.strip()) if segment else None
    engine = engine_for(settings)
    migrate.upgrade(engine)
    with engine.connect() as conn:
        trend = compute_trend(conn, settings, days=days, segment_keys=keys)
    if as_json:
        import json

        from judgeflow.alerts.trend import trend_json

        typer.echo(json.dumps(trend_json(trend), indent=2))
        return
    typer.echo(render_text(trend))


@app.command()
@clear_errors
def show(trace_id: str = typer.Argument(..., help="the trace's id, as in the trace source")) -> None:
    """One trace's results per metric: score, pass/fail, reason, verdicts, judge and metric version,
    cost, when and by which flow run (with its Prefect UI link), and whether it was copied from an
    identical trace. Exit code 1 when judgeflow knows nothing of the id."""
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.db.trace_results import find_trace, render
    from judgeflow.db.trace_source import trace_source
    from judgeflow.prefect_server import ui_url_without_import

    settings = _settings()
    migrate.upgrade(engine_for(settings))
    view = find_trace(settings, trace_id)
    if not view.known:
        where = "could not be asked in time" if view.in_source is None else "has no such id"
        typer.echo(f"judgeflow: no trace {trace_id!r}: judgeflow has no result or claim for it, and "
                   f"{trace_source(settings).display} {where}", err=True)
        raise typer.Exit(1)
    typer.echo(render(view, ui_url=ui_url_without_import(settings), source_name=trace_source(settings).display))


def _announce_database(settings) -> None:
    from judgeflow.db.engine import database_url, redact

    where = "embedded" if settings.uses_embedded_database else "configured"
    typer.echo(f"database ({where}): {redact(database_url(settings))}", err=True)


@app.command()
@clear_errors
def demo(
    reset: bool = typer.Option(False, "--reset", help="delete the embedded database and start over"),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="print every log line (each batch, each task run), not only warnings and errors"
    ),
) -> None:
    """Run the whole product on demo traces: embedded PostgreSQL, scoring flow, alerts, summary."""
    _quiet_unless(verbose)
    import time

    from judgeflow.demo import run as demo_run
    from judgeflow.demo.report import build_report, render

    started = time.monotonic()
    settings = _settings()
    if not settings.uses_embedded_database:
        typer.echo("demo: JUDGEFLOW_DATABASE_URL is set; the demo uses its own embedded database instead", err=True)
    overrides = {"database_url": None}
    judge_note = f"{settings.judge_model} (JUDGEFLOW_JUDGE_MODEL)"
    if "JUDGEFLOW_JUDGE_MODEL" not in os.environ:
        overrides["judge_model"] = "offline"
        judge_note = (
            "offline (no judge configured: a trained profanity classifier and a context-overlap check; "
            "set JUDGEFLOW_JUDGE_MODEL for an LLM judge)"
        )
    # the flow reads its settings from the environment at its own entry point
    os.environ["JUDGEFLOW_DATABASE_URL"] = ""
    if "judge_model" in overrides:
        os.environ["JUDGEFLOW_JUDGE_MODEL"] = overrides["judge_model"]
    settings = settings.model_copy(update=overrides)
    if reset:
        demo_run.reset(settings)
        typer.echo("demo: embedded database and Prefect state removed", err=True)
    typer.echo(f"demo: judge = {judge_note}", err=True)
    typer.echo(f"demo: starting embedded PostgreSQL under {settings.home}", err=True)
    inserted = demo_run.load_traces(settings)
    typer.echo(f"demo: {inserted} new demo traces loaded into llm_traces", err=True)
    _, local = _use_prefect(settings)

    from judgeflow.flows.scoring import score_new_traces

    summary = _watched("demo", settings, lambda: score_new_traces(evaluate_alerts=True))
    ui_url = local.ui_url if local is not None else demo_run.configured_ui_url()
    if summary.flow_run_id and not demo_run.wait_for_prefect_records(summary.flow_run_id):
        typer.echo("demo: Prefect's server is still recording the run's task runs; the UI will show them "
                   "in a moment", err=True)
    typer.echo(render(build_report(settings), judge_note=judge_note, ui_url=ui_url,
                      flow_run_id=summary.flow_run_id, ran_s=time.monotonic() - started))
    _exit_if_stopped(summary)


@app.command()
@clear_errors
def ui(
    open_browser: bool = typer.Option(False, "--open", help="also open it in the default web browser"),
) -> None:
    """Print the Prefect UI's URL (judgeflow's local Prefect server, started if needed)."""
    settings = _settings()
    _, local = _use_prefect(settings)
    if local is not None:
        url = local.ui_url
    else:
        from judgeflow.demo.run import configured_ui_url

        url = configured_ui_url() or ""
        if not url:
            typer.echo("judgeflow: PREFECT_API_URL is set but Prefect knows no UI URL for it (PREFECT_UI_URL)",
                       err=True)
            raise typer.Exit(1)
    typer.echo(url)
    if open_browser:
        import webbrowser

        if not webbrowser.open(url):
            typer.echo("judgeflow: no web browser could be opened here; open the URL above", err=True)


@app.command()
@clear_errors
def stop() -> None:
    """Stop what judgeflow keeps running under JUDGEFLOW_HOME between commands: the local Prefect
    server and the embedded PostgreSQL."""
    from judgeflow.db.embedded import EmbeddedPostgres
    from judgeflow.prefect_server import LocalPrefectServer

    settings = _settings()
    if LocalPrefectServer.for_settings(settings).stop():
        typer.echo("Prefect's local server stopped")
    else:
        typer.echo("Prefect's local server was not running")
    database = EmbeddedPostgres.for_settings(settings)
    if database.is_initialised() and database.is_running():
        database.stop()
        typer.echo("embedded PostgreSQL stopped")
    else:
        typer.echo("embedded PostgreSQL was not running")


# --- db ------------------------------------------------------------------------
@db_app.command("upgrade")
@clear_errors
def db_upgrade() -> None:
    """Create or migrate judgeflow's own tables (schema 'judgeflow')."""
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for

    settings = _settings()
    _announce_database(settings)
    typer.echo(f"judgeflow schema at revision {migrate.upgrade(engine_for(settings))}")


@db_app.command("check")
@clear_errors
def db_check(
    full: bool = typer.Option(
        False, "--full", help="count unusable rows over the whole source (default: the window the next run reads)"
    ),
) -> None:
    """Check the trace source and judgeflow's schema; exit 1 if anything is missing."""
    from judgeflow.db.check import check_database

    settings = _settings()
    _announce_database(settings)
    report = check_database(settings, full=full)
    for line in report.lines():
        typer.echo(line)
    if not report.ok:
        raise typer.Exit(1)


@db_app.command("start")
@clear_errors
def db_start() -> None:
    """Start the embedded PostgreSQL (under JUDGEFLOW_HOME) if it is not running."""
    from judgeflow.db.embedded import EmbeddedPostgres

    typer.echo(EmbeddedPostgres.for_settings(_settings()).start())


@db_app.command("stop")
@clear_errors
def db_stop() -> None:
    """Stop the embedded PostgreSQL."""
    from judgeflow.db.embedded import EmbeddedPostgres

    EmbeddedPostgres.for_settings(_settings()).stop()
    typer.echo("embedded PostgreSQL stopped")


def main() -> None:  # pragma: no cover - console entry point
    global _OWNS_PROCESS
    _OWNS_PROCESS = True
    app(prog_name="judgeflow")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
