"""`judgeflow alerts` (list current and past alerts) and `judgeflow alerts check`.

The lead mounts :data:`alerts_app` with ``app.add_typer(alerts_app, name="alerts")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

import typer

from judgeflow.cli.errors import JudgeflowGroup, clear_errors

alerts_app = typer.Typer(
    help="Alert rules: current state and past alerts; `check` evaluates them now.",
    invoke_without_command=True,
    rich_markup_mode=None,  # as the app's (judgeflow/cli/app.py)
    cls=JudgeflowGroup,
)


def _when(value: datetime | None) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _outcome(outcome: str | None, epoch_started_at: datetime | None = None) -> str:
    if outcome == "insufficient_data":
        return f"insufficient data: judge changed at {_when(epoch_started_at)}"
    return {"not_enough_data": "not enough data", None: "-"}.get(outcome, outcome or "-")


def _limit(value: float | None, *, regression: bool) -> str:
    """A maximum rule's line, or a regression rule's smallest rise over its baseline that pages."""
    if value is None:
        return "-"
    return f"min rise +{_pct(value)}" if regression else f"max {_pct(value)}"


def _state(state: str, value: float | None, maximum: float | None, hysteresis: float) -> str:
    """A firing maximum rule back below its line says it is held, and until when (hysteresis)."""
    if state != "firing" or value is None or maximum is None or value > maximum:
        return state.upper()
    return f"FIRING (held by hysteresis until at or below {_pct(maximum * (1 - hysteresis))})"


def _p(value: float | None) -> str:
    return "-" if value is None else ("<0.0001" if value < 1e-4 else f"{value:.4f}")


def segment_keys_in_force(settings) -> str:
    """Which metadata keys the rules segment by now, and where they come from."""
    keys = ", ".join(settings.alert_segment_keys)
    if settings.alert_segment_by:
        found = f"by {keys}: JUDGEFLOW_ALERT_SEGMENT_BY"
    elif keys:
        found = f"by {keys}: the {settings.source} preset's default (JUDGEFLOW_ALERT_SEGMENT_BY is not set)"
    else:
        found = "JUDGEFLOW_ALERT_SEGMENT_BY is not set"
    own = _own_segment_keys()
    if own:
        return f"{found}; {own}"
    return found if keys else "none in force now: JUDGEFLOW_ALERT_SEGMENT_BY is not set; these are from earlier " \
                              "evaluations"


def _own_segment_keys() -> str:
    """The metrics whose rules segment by keys of their own (a metrics file's segment_by), and those keys."""
    from judgeflow.metrics.registry import registered

    own = [f"{name}'s rules by {', '.join(spec.segment_by) or 'nothing (overall only)'}"
           for name, spec in registered().items() if spec.segment_by is not None]
    return "; ".join(own) + (": their own segment_by" if own else "")


def _rule(rule: str, segment_key: str | None) -> str:
    return f"{rule} [{segment_key}]" if segment_key else rule


def _delivery(status: str | None, error: str | None) -> str:
    if status is None:
        return "-"
    return f"{status}: {error[:80]}" if error else status


def evaluated_line(evaluations: list) -> str:
    """What an evaluation found, in one line: the rules firing (`judgeflow alerts` shows the tables)."""
    enabled = [e for e in evaluations if e.enabled]
    firing = [f"{_rule(e.rule, e.segment_label if e.segment else '')} ({_pct(e.value)}, "
              f"{_limit(e.threshold, regression=e.is_regression)}"
              f"{', ' + e.held_note if e.held_until is not None else ''})" for e in enabled if e.state == "firing"]
    head = f"alert rules evaluated: {len({e.rule for e in enabled})} enabled, "
    return head + (f"firing: {'; '.join(firing)}" if firing else "none firing") + " (`judgeflow alerts` shows them)"


def alert_tables_exist_now(engine) -> bool:
    from judgeflow.alerts.state import alert_tables_exist

    with engine.connect() as conn:
        return alert_tables_exist(conn)


@dataclass
class _Reading:
    """What `judgeflow alerts` shows, read in one connection."""

    epochs: list = field(default_factory=list)
    rows: dict = field(default_factory=dict)  # each rule's state over all results, by rule
    segments: list = field(default_factory=list)  # the states of the rules' segments
    history: list = field(default_factory=list)
    waiting: list = field(default_factory=list)  # undelivered notifications
    dead: list = field(default_factory=list)  # dead deliveries
    dead_line: str | None = None


def _read(settings, *, limit: int, rule: str | None) -> _Reading:
    from judgeflow.alerts.dead_letters import dead_deliveries, dead_summary
    from judgeflow.alerts.outbox import outbox_exists, undelivered
    from judgeflow.alerts.state import alert_history, alert_tables_exist, current_alerts
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.sources.identity import result_source
    from judgeflow.db.epochs import epoch_history

    engine = engine_for(settings)
    if alert_tables_exist_now(engine):
        migrate.upgrade(engine)  # the rows carry columns of later revisions (epoch_started_at)
    with engine.connect() as conn:
        reading = _Reading(epochs=epoch_history(conn, result_source(settings)))
        if alert_tables_exist(conn):
            everything = current_alerts(conn, source=result_source(settings))  # the configured source's
            reading.rows = {row.rule: row for row in everything if not row.segment_key}
            reading.segments = [row for row in everything if row.segment_key]
            reading.history = alert_history(conn, limit=limit, rule=rule, source=result_source(settings))
        if outbox_exists(conn):
            reading.waiting = [w for w in undelivered(conn, limit=200) if rule is None or w.rule == rule]
            if _has_dead_at(conn):
                reading.dead = [w for w in dead_deliveries(conn, limit=200, source=result_source(settings))
                                if rule is None or w.rule == rule][:limit]
                reading.dead_line = dead_summary(conn, result_source(settings)).line()
    return reading


def _since(row) -> str:
    return _when(row.opened_at) if row.state == "firing" else _when(row.resolved_at) if row.resolved_at else "-"


def _print_rules(settings, rules: list, rows: dict) -> None:
    """Each rule's state over all results: the configured rules first, then rules with a stored state only."""
    typer.echo(
        f"Alert rules (window {settings.alert_window}, at least {settings.alert_min_samples} samples, "
        f"re-notify {settings.alert_renotify or 'never'})"
    )
    table = []
    names = [r.name for r in rules] + sorted(set(rows) - {r.name for r in rules})
    by_name = {r.name: r for r in rules}
    for name in names:
        spec, row = by_name.get(name), rows.get(name)
        maximum = spec.maximum if spec else None
        enabled = spec is not None and spec.enabled
        regression = spec.is_regression if spec else name.endswith("_regression")
        limit = _limit(spec.limit if enabled else row.threshold if row else None, regression=regression)
        state = (_state(row.state, row.value, maximum, settings.alert_hysteresis) if row else "OK") if enabled \
            else "disabled"
        if row is None:
            table.append([name, state, "never evaluated" if enabled else "-", "-", limit, "-", "-", "-", "-", "-"])
            continue
        table.append([
            name, state, _outcome(row.last_outcome, row.epoch_started_at), _pct(row.value), limit,
            f"{row.sample_size}/{row.min_samples or '-'}", str(row.failed_count), _since(row),
            _when(row.last_notified_at), _delivery(row.delivery_status, row.delivery_error),
        ])
    typer.echo(_table(
        ["rule", "state", "last evaluation", "value", "limit", "samples/min", "failed", "since", "last notified", "delivery"],
        table,
    ))
    typer.echo("")


def _print_segments(settings, segments: list) -> None:
    if not segments:
        typer.echo(f"Segments ({segment_keys_in_force(settings)}): none evaluated yet")
        return
    typer.echo(f"Segments ({segment_keys_in_force(settings)})")
    typer.echo(_table(
        ["rule", "segment", "state", "last evaluation", "value", "baseline", "p (rise)", "samples/baseline",
         "since", "last notified", "delivery"],
        [
            [r.rule, r.segment_key, r.state.upper(), _outcome(r.last_outcome, r.epoch_started_at), _pct(r.value),
             _pct(r.baseline_value), _p(r.p_value), f"{r.sample_size}/{r.baseline_sample_size or 0}", _since(r),
             _when(r.last_notified_at), _delivery(r.delivery_status, r.delivery_error)]
            # firing first, then by rule
            for r in sorted(segments, key=lambda r: (r.state != "firing", r.rule, r.segment_key))
        ],
    ))
    typer.echo("")


def _print_deliveries(waiting: list, dead: list) -> None:
    """The notifications still to deliver, then those given up on."""
    if waiting:
        typer.echo("Undelivered notifications (retried at every evaluation: scoring runs and `judgeflow alerts check`)")
        typer.echo(_table(
            ["id", "when", "rule", "alert", "channel", "tries", "attempts", "last tried", "next due", "last error",
             "delivery id"],
            [
                [str(w.event_id), _when(w.occurred_at), _rule(w.rule, w.segment_key), w.kind, w.channel, str(w.tries), str(w.attempts),
                 _when(w.last_attempt_at), _when(w.next_attempt_at), (w.last_error or "-")[:80], str(w.delivery_id)]
                for w in waiting
            ],
        ))
        typer.echo("")
    if dead:
        typer.echo("Dead deliveries (given up on, not retried; each was logged and emitted as a "
                   "judgeflow.alert.delivery.dead Prefect event, and the dead_delivery_rate rule pages about them)")
        typer.echo(_table(
            ["id", "when", "rule", "alert", "channel", "tries", "attempts", "dead since", "http", "last error",
             "delivery id"],
            [
                [str(w.event_id), _when(w.occurred_at), _rule(w.rule, w.segment_key), w.kind, w.channel, str(w.tries),
                 str(w.attempts), _when(w.dead_at), str(w.http_status or "-"), (w.last_error or "-")[:80],
                 str(w.delivery_id)]
                for w in dead
            ],
        ))
        typer.echo("")


def _print_epochs(epochs: list, limit: int) -> None:
    if epochs:
        typer.echo("Judge epochs (rules count only the results of each metric's latest; newest first)")
        typer.echo(_table(
            ["started", "metric", "metric version", "judge model", "flow run"],
            [[_when(e.started_at), e.metric, e.metric_version, e.judge_model, e.flow_run_id or "-"]
             for e in reversed(epochs[-limit:])],
        ))
        typer.echo("")


def _print_history(history: list, *, limit: int, rule: str | None) -> None:
    if not history:
        typer.echo("No alerts yet." if rule is None else f"No alerts yet for {rule}.")
        return
    typer.echo(f"Past alerts (newest first, up to {limit})")
    typer.echo(_table(
        ["id", "when", "rule", "alert", "value", "limit", "samples", "failed", "flow run", "delivery"],
        [
            [str(h.id), _when(h.occurred_at), _rule(h.rule, h.segment_key), h.kind, _pct(h.value),
             _limit(h.threshold, regression=h.rule.endswith("_regression")), str(h.sample_size),
             str(h.failed_count), h.flow_run_id or "-", _delivery(h.delivery_status, h.delivery_error)]
            for h in history
        ],
    ))


def alerts_json(settings, rules: list, reading: _Reading, *, limit: int) -> dict:
    """`judgeflow alerts --json`: the tables of the text as lists of objects, each row's stored columns."""
    by_name = {r.name: r for r in rules}
    names = [r.name for r in rules] + sorted(set(reading.rows) - set(by_name))
    states = []
    for name in names:
        spec, row = by_name.get(name), reading.rows.get(name)
        enabled = spec is not None and spec.enabled
        state = (row.state if row else "ok") if enabled else "disabled"
        states.append({**(row._asdict() if row else {}), "rule": name, "state": state, "enabled": enabled,
                       "kind": spec.kind if spec else None, "maximum": spec.maximum if spec else None,
                       "min_increase": spec.min_increase if spec else None, "evaluated": row is not None})
    return {
        "window": settings.alert_window, "min_samples": settings.alert_min_samples,
        "segment_keys": list(settings.alert_segment_keys), "rules": states,
        "segments": [r._asdict() for r in reading.segments],
        "undelivered": [w._asdict() for w in reading.waiting], "dead": [w._asdict() for w in reading.dead],
        "dead_summary": reading.dead_line, "epochs": [e.as_json() for e in reversed(reading.epochs[-limit:])],
        "history": [h._asdict() for h in reading.history],
    }


@alerts_app.callback()
@clear_errors
def list_alerts(
    ctx: typer.Context,
    limit: int = typer.Option(20, min=1, help="how many past alerts to show"),
    rule: Optional[str] = typer.Option(None, help="only this rule's past alerts"),
    as_json: bool = typer.Option(False, "--json", help="print the same as one JSON object"),
) -> None:
    """List each rule's current state and the most recent alerts (fired, reminder, resolved)."""
    if ctx.invoked_subcommand is not None:
        return
    from judgeflow.alerts.rules import all_rules
    from judgeflow.cli.command import command_settings

    settings = command_settings()
    rules = all_rules(settings)
    reading = _read(settings, limit=limit, rule=rule)
    if as_json:
        from judgeflow.cli.json_output import dumps

        typer.echo(dumps(alerts_json(settings, rules, reading, limit=limit)))
        return
    if reading.dead_line:
        typer.secho(reading.dead_line, fg="red")
        typer.echo("")
    _print_rules(settings, rules, reading.rows)
    _print_segments(settings, reading.segments)
    _print_deliveries(reading.waiting, reading.dead)
    _print_epochs(reading.epochs, limit)
    _print_history(reading.history, limit=limit, rule=rule)


def _rate_on_lines(results: list) -> list[str]:
    """A line per maximum rule set to the corrected rate (JUDGEFLOW_<NAME>_RATE_ON=corrected): the rate it
    decided on, or why it fell back to the judged rate."""
    lines = []
    for r in results:
        if not r.enabled or (r.rate_on != "corrected" and not r.rate_on_note):
            continue
        name = r.rule + (f" [{r.segment_label}]" if r.segment else "")
        lines.append(f"{name}: decided on the {r.rate_said}" if r.rate_on == "corrected"
                     else f"{name}: {r.rate_on_note}")
    return lines


@alerts_app.command("check", short_help="Evaluate every enabled rule now; send the notifications due.")
@clear_errors
def check(
    fail_on_firing: bool = typer.Option(False, "--fail-on-firing", help="exit with code 1 when a rule is firing"),
    redeliver_now: bool = typer.Option(
        False, "--redeliver-now", help="try every undelivered notification now, ignoring the redelivery backoff"
    ),
) -> None:
    """Evaluate every enabled rule now and send the notifications due, earlier undelivered ones included."""
    from judgeflow.alerts.service import evaluate_rules
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.cli.command import command_settings, use_prefect

    settings = command_settings()
    engine = engine_for(settings)
    migrate.upgrade(engine)
    use_prefect(settings)  # dead deliveries' events (and alert events) go to the runs' Prefect server
    results = evaluate_rules(settings, engine=engine, include_disabled=True, redeliver_now=redeliver_now)
    _flush_prefect_events()

    typer.echo(_table(
        ["rule", "state", "evaluation", "value", "limit", "samples/min", "failed", "baseline", "p (rise)", "notification"],
        [
            [r.rule, "disabled", "-", "-", "-", "-", "-", "-", "-", "-"] if not r.enabled else [
                _rule(r.rule, "" if not r.segment else r.segment_label),
                _state(r.state or "", r.value, None if r.is_regression else r.threshold, settings.alert_hysteresis),
                _outcome(r.outcome, r.epoch_started_at),
                _pct(r.value), _limit(r.threshold, regression=r.is_regression),
                f"{r.sample_size}/{r.min_samples}", str(r.failed_count), _pct(r.baseline_value),
                _p(r.p_value) + (f" (Holm {_p(r.p_adjusted)})" if r.p_adjusted is not None and (r.tests or 0) > 1
                                 else ""),
                f"{r.transition} ({_delivery(r.delivery_status, r.delivery_error)})" if r.transition else "-",
            ]
            for r in results
        ],
    ))
    for line in _rate_on_lines(results):
        typer.echo(line)
    for r in results:
        for again in r.redelivered:
            line = (f"{r.rule}: earlier {again['notification']} (#{again['alert_id']}) via {again['channel']}: "
                    f"{again['status']} (try {again['tries']})")
            if again["status"] == "failed":
                typer.secho(f"{line}: {again['error']}; retried at the next evaluation", fg="yellow", err=True)
            elif again["status"] == "dead":
                typer.secho(f"{line}: {again['error']}; dead: not retried", fg="red", err=True)
            elif again["status"] == "deferred":
                typer.echo(f"{line}: not attempted here (no Prefect API, or no delivery time left); left pending")
            else:
                typer.echo(line)
        if r.delivery_status in ("failed", "partial", "dead"):
            typer.secho(
                f"{r.rule}: notification delivery {r.delivery_status}: {r.delivery_error}; retried at the next evaluation",
                fg="yellow", err=True,
            )
    if fail_on_firing and any(r.state == "firing" for r in results):
        raise typer.Exit(1)


def _has_dead_at(conn) -> bool:
    """Whether the outbox has its dead letters (migration 08_dead_deliveries.py): `judgeflow alerts` reads, never migrates."""
    from sqlalchemy import text

    return bool(conn.execute(text(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = 'judgeflow' "
        "AND table_name = 'alert_deliveries' AND column_name = 'dead_at'"
    )).first())


def _flush_prefect_events() -> None:
    """A CLI process exits right away: send queued events before it does."""
    try:
        from prefect.events.worker import EventsWorker

        EventsWorker.drain_all(timeout=10)
    except Exception:
        pass
