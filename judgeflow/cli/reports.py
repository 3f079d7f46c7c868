"""`judgeflow status`, `report` and `show`: what the database says, read now."""

from __future__ import annotations

from typing import Optional

import typer

from judgeflow.cli.command import announce_database, command_settings, use_prefect
from judgeflow.cli.errors import clear_errors


@clear_errors
def status(
    as_json: bool = typer.Option(False, "--json", help="print the figures as JSON"),
) -> None:
    """Results per metric and status, what is pending, and what live runs are scoring now.

    scored, passed, skipped, failed, given up: exact counts, kept by triggers on judgeflow.eval_results.
    pending: the pairs without a done result that no live run holds, in what the next nightly run reads:
    the traces created since the window's start (the watermark minus JUDGEFLOW_SOURCE_LOOKBACK; the
    whole source before the first run) and failed pairs older than that. Older traces without a result
    are not counted: `judgeflow backfill` scores them. in progress / stranded: claims held by a live run /
    by a run that is gone or stopped renewing its lease (the next run takes those over at once).
    sessions waiting: sessions with turns no judging saw, quiet (JUDGEFLOW_SESSION_IDLE since their last
    turn: the next run judges them) or still open."""
    import json

    from judgeflow.status.notes import dead_delivery_line
    from judgeflow.status.work import work_status

    settings = command_settings()
    announce_database(settings)
    report = work_status(settings)
    report["account_limits"] = _account_limits(settings)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    dead = dead_delivery_line(report)  # alert deliveries given up on (judgeflow/status/notes.py)
    typer.echo(render_status(report) + (f"\n{dead}" if dead else ""))


def _account_limits(settings) -> list[dict]:
    """JUDGEFLOW_JUDGE_RPM/TPM's limits as the Prefect API holds them (none set: none, and no Prefect call)."""
    from judgeflow.run.account import account_shapes, account_status

    if not account_shapes(settings):
        return []
    use_prefect(settings)
    return account_status(settings)


def render_status(report: dict, width: int | None = None) -> str:
    """``judgeflow status``'s text: a table of figures per metric, what they count, the runs holding claims;
    within the terminal's width (the table stacked, the lines wrapped on a terminal: judgeflow/cli/layout.py);
    ``width``: that width, as on a terminal."""
    from judgeflow.cli.layout import figure_table, line_width, table_width, wrapped
    from judgeflow.status.notes import status_notes

    columns = list(dict.fromkeys(k for row in report["metrics"].values() for k in row))  # every figure, in order
    lines = figure_table(report["metrics"], columns, width or table_width())
    window = report.get("window_start")
    lines.append(("pending: in the whole source (no watermark yet)" if window is None else
                  f"pending: in traces created since {window}, and failed pairs")
                 + "; `judgeflow status --help` says what each column counts")
    lines.extend(status_notes(report))
    per_session = [m for m, unit in report.get("units", {}).items() if unit == "sessions"]
    if per_session:
        lines.append(f"{', '.join(per_session)}: counted in sessions, each by its latest score "
                     "(a trace metric's session rate: a session fails when any of its turns failed)")
    lines.extend(_rate_line(metric, r) for metric, r in report.get("rates", {}).items())
    if report.get("not_sampled"):
        lines.append(f"{report['not_sampled']:,} traces not sampled under the budget (not pending; "
                     "`judgeflow backfill` can still judge them)")
    waiting = report.get("sessions_waiting") or {}
    if waiting.get("quiet") or waiting.get("open"):
        lines.append(f"sessions waiting: {waiting['quiet']:,} quiet (the next run judges them), {waiting['open']:,} "
                     f"still open (judged once quiet for {waiting['idle']})")
    for run in report["runs"]:
        pairs = ", ".join(f"{m} {n}" for m, n in run["pairs"].items())
        state = f"in progress, lease until {run['lease_expires_at']}" if run["live"] else "stranded (run is gone)"
        lines.append(f"flow run {run['flow_run_id']}: {pairs} ({state})")
    return "\n".join(wrapped(lines, width or line_width()))


def _rate_line(metric: str, r: dict) -> str:
    if r["rate"] is None:
        return f"{metric} not-passed rate, last {r['window']}: no judged results"
    unit = r.get("unit", "traces")
    judged = (f"{metric} not-passed rate, last {r['window']}: judged {r['rate']:.1%} (95% CI {r['ci_low']:.1%}-"
              f"{r['ci_high']:.1%}; {r['judged']:,} judged of ~{r[unit]:,} {unit})")
    if r.get("corrected_rate") is None:
        return judged + f"; corrected: none ({r.get('corrected_note') or 'no labels read'})"
    return (judged + f"; corrected {r['corrected_rate']:.1%} (95% CI {r['corrected_ci_low']:.1%}-"
            f"{r['corrected_ci_high']:.1%}). judged: what the judge said; corrected: adjusted for the judge's "
            f"error measured on {r['labels']:,} labels")


@clear_errors
def report(
    since: str = typer.Option("14d", help="how far back the per-day rates go, e.g. 14d or 4w"),
    segment: Optional[list[str]] = typer.Option(
        None, "--segment", help="a metadata key to break the rates down by (default: each metric's rules' keys, "
                                "its own segment_by or JUDGEFLOW_ALERT_SEGMENT_BY)"
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
    from judgeflow.config.settings import parse_duration

    settings = command_settings()
    announce_database(settings)
    days = max(1, math.ceil(parse_duration(since) / 86400))
    keys = tuple(k.strip() for s in segment for k in s.split(",") if k.strip()) if segment else None
    engine = engine_for(settings)
    migrate.upgrade(engine)
    with engine.connect() as conn:
        trend = compute_trend(conn, settings, days=days, segment_keys=keys)
        notes = _segment_notes(settings, conn, keys, trend)
    if as_json:
        import json

        from judgeflow.alerts.trend import trend_json

        typer.echo(json.dumps({**trend_json(trend), "notes": notes}, indent=2))
        return
    typer.echo("\n".join([render_text(trend), *notes]))


def _segment_notes(settings, conn, keys: tuple[str, ...] | None, trend) -> list[str]:
    """A key the report breaks down by that the period's results do not all carry, said in one line."""
    from datetime import datetime, timezone

    from judgeflow.alerts.segment_fill import missing_key_lines
    from judgeflow.metrics.registry import metric_names

    if keys is None:  # each metric's rules' keys
        keys = tuple(dict.fromkeys(k for m in metric_names() for k in settings.metric_segment_keys(m)))
    start = datetime.combine(trend.since, datetime.min.time(), tzinfo=timezone.utc)
    return missing_key_lines(settings, conn, keys, start)


def _show_session(settings, wanted: str, as_json: bool) -> bool:
    """A session (its result id, or its key's value in the configured source): its turns and each
    session metric's scores, newest first; False when ``wanted`` is no session."""
    from judgeflow.db.engine import engine_for
    from judgeflow.db.session_history import find_session, render_session, session_json, session_scores
    from judgeflow.sources.identity import result_source

    with engine_for(settings).connect() as conn:
        session = find_session(conn, result_source(settings), wanted)
        if session is None:
            return False
        doc = session_json(session, session_scores(conn, session["session_id"]))
    if as_json:
        from judgeflow.cli.json_output import dumps

        typer.echo(dumps(doc))
    else:
        typer.echo(render_session(doc))
    return True


@clear_errors
def show(trace_id: str = typer.Argument(
        ..., help="the trace's id, as in the trace source; with JUDGEFLOW_SOURCE=phoenix also a Phoenix trace id "
        "or the id of any span of the trace (its LLM spans are listed); or a session: its key's value "
        "(JUDGEFLOW_SESSION_KEY) or its result id (s:...), with its scores' history newest first"),
        as_json: bool = typer.Option(False, "--json", help="print the results as JSON")) -> None:
    """One trace's results per metric: score, pass/fail, reason, verdicts, judge and metric version,
    cost, when and by which flow run (with its Prefect UI link), and whether it was copied from an
    identical trace. Exit code 1 when judgeflow knows nothing of the id."""
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.db.trace_results import look_up, render_lookup
    from judgeflow.sources.trace_source import trace_source
    from judgeflow.infra.prefect_server import ui_url_without_import

    settings = command_settings()
    migrate.upgrade(engine_for(settings))
    from judgeflow.sources.session_id import is_session_id

    if is_session_id(trace_id) and _show_session(settings, trace_id, as_json):
        return
    found = look_up(settings, trace_id)  # a Phoenix source: also a Phoenix trace id or any span id
    if not found.known and _show_session(settings, trace_id, as_json):  # a session key's value
        return
    if not found.known:
        where = "could not be asked in time" if found.views[0].in_source is None else "has no such id"
        typer.echo(f"judgeflow: no trace {trace_id!r}: judgeflow has no result or claim for it, and "
                   f"{trace_source(settings).display} {where}", err=True)
        raise typer.Exit(1)
    if as_json:
        from judgeflow.cli.json_output import dumps
        from judgeflow.db.trace_results import lookup_json

        typer.echo(dumps(lookup_json(found, ui_url=ui_url_without_import(settings))))
        return
    typer.echo(render_lookup(found, ui_url=ui_url_without_import(settings),
                             source_name=trace_source(settings).display))
