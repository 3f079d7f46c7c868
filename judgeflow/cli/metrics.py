"""``judgeflow metrics``: every metric served, where it comes from, its version,
the model that judges it, what it reads, its alert rules and the segment keys they are evaluated by; ``--check FILE``
validates a metrics file without judging anything."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from judgeflow.cli.errors import clear_errors


def _pct(value: float) -> str:
    return f"{value * 100:g}%"


def metric_rows(settings) -> list[dict]:
    """One row per registered metric, in registration order."""
    from judgeflow.alerts.rules import all_rules
    from judgeflow.config.judge_models import judge_models
    from judgeflow.metrics.registry import origin_of, registered

    rules: dict[str, list[str]] = {}
    for rule in all_rules(settings):
        if rule.metric is not None and rule.enabled:
            limit = f"+{_pct(rule.limit)}" if rule.is_regression else f"max {_pct(rule.limit)}"
            rules.setdefault(rule.metric, []).append(f"{rule.name} {limit}")
    rows = []
    models = judge_models(settings)
    for name, spec in registered().items():
        own = settings.metric(name)
        rows.append({
            "name": name, "origin": origin_of(name), "version": spec.version, "judge_model": models[name],
            "inputs": list(spec.fields),
            "passes": f"score {'>=' if spec.higher_is_better else '<='} {own.threshold:g}",
            "rules": rules.get(name, []), "segment_by": list(settings.metric_segment_keys(name)),
            "segment_by_own": spec.segment_by is not None, "description": spec.description,
        })
    return rows


def _segments(row: dict) -> str:
    keys = ", ".join(row["segment_by"])
    where = "its own segment_by" if row["segment_by_own"] else "JUDGEFLOW_ALERT_SEGMENT_BY"
    return f"rules per {keys} ({where})" if keys else f"rules overall only ({where})"


def _read_stored_steps(settings) -> str | None:
    """Metrics whose evaluation steps the judge wrote at an earlier run get
    them from the database, so the versions listed are the ones runs score
    with. Never asks the judge and never starts the embedded database; what
    could not be read is said in the returned note."""
    from judgeflow.metrics.registry import registered

    waiting = {name: spec for name, spec in registered().items()
               if spec.prepare is not None and not spec.prepare.ready()}
    if not waiting:
        return None
    from sqlalchemy.exc import SQLAlchemyError

    from judgeflow.db.embedded import EmbeddedPostgres
    from judgeflow.db.engine import engine_for
    from judgeflow.db.prepared import accept_stored

    pending = ", ".join(waiting)
    if settings.database_url is None and not EmbeddedPostgres.for_settings(settings).is_running():
        return f"the embedded database is not running: {pending} show steps-pending"
    try:
        with engine_for(settings).connect() as conn:
            left = accept_stored(conn, waiting)
    except SQLAlchemyError as error:  # the listing still shows what the file says
        return f"the stored evaluation steps could not be read ({type(error).__name__}): {pending} show steps-pending"
    if left:
        return f"{', '.join(left)}: evaluation steps not written yet (the next run asks the judge once)"
    return None


@clear_errors
def metrics(
    check: Path = typer.Option(None, "--check", metavar="FILE",
                               help="validate a metrics file (TOML) without judging; exit 0 when it is usable, 2 "
                                    "with one line naming the problem"),
    as_json: bool = typer.Option(False, "--json", help="the list as JSON"),
) -> None:
    """List every metric: its origin (built-in, file, plugin), version, inputs, alert rules and their segment keys."""
    if check is not None:
        from judgeflow.metrics.geval.file import load_metrics_file

        specs = load_metrics_file(check)
        names = ", ".join(spec.name for spec in specs) or "none"
        typer.echo(f"{check}: {len(specs)} metric(s) usable: {names}")
        for line in _unpriced_models(check, specs):
            typer.echo(line, err=True)
        return
    from judgeflow.cli.command import command_settings
    from judgeflow.metrics.registry import served_file

    settings = command_settings()
    note = _read_stored_steps(settings)
    rows = metric_rows(settings)
    if as_json:
        typer.echo(json.dumps({"metrics_file": served_file(), "metrics": rows, "note": note}, indent=2))
        return
    if note:
        typer.echo(f"note: {note}", err=True)
    if served_file():
        typer.echo(f"metrics file: {served_file()}")
    from judgeflow.cli.layout import line_width, wrapped

    lines = []
    for row in rows:
        rules = "; ".join(row["rules"]) or "no alert rule on"
        lines.append(f"{row['name']:<16} {row['origin']:<9} {row['version']:<28} judged by {row['judge_model']}; "
                     f"reads {', '.join(row['inputs'])}; passes at {row['passes']}; {rules}; {_segments(row)}")
    for line in wrapped(lines, line_width()):  # a metric a line when piped (grep); wrapped on a terminal
        typer.echo(line)


def _unpriced_models(path: Path, specs) -> list[str]:
    """A warning line per metric whose own judge model litellm cannot price: it is
    judged all the same (as an unpriced JUDGEFLOW_JUDGE_MODEL is), its cost unknown."""
    from judgeflow.judge.pricing import map_prices  # imports litellm: only for a file that names a model

    return [f"{path}: metric {spec.name}: model: warning: litellm has no price for {spec.judge_model!r}: its "
            "results' cost stays unknown, and a run, sample or calibration budget refuses to start"
            for spec in specs if spec.judge_model and map_prices(spec.judge_model) is None]
