"""The demo's closing summary, read from the database (not from the run), so a
second, idempotent run shows the same figures as the first."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import text

from judgeflow.db.engine import database_url, engine_for, redact
from judgeflow.config.settings import Settings
from judgeflow.metrics.registry import metric_names, registered


@dataclass
class DemoReport:
    traces: int = 0
    scored: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    fail_rate: dict[str, float | None] = field(default_factory=dict)
    skip_reasons: dict[str, str] = field(default_factory=dict)  # the most frequent, per metric
    alerts: list[dict] = field(default_factory=list)
    worst: list[dict] = field(default_factory=list)
    judge_models: list[str] = field(default_factory=list)
    database: str = ""
    psql: str | None = None  # a command that logs in, when there is one to print
    embedded_database: str = ""
    hysteresis: float = 0.0  # JUDGEFLOW_ALERT_HYSTERESIS: where a firing maximum rule resolves


def _psql_command(settings: Settings) -> str | None:
    """A psql command line that can log in without printing a password: the embedded
    database's password file (libpq's format) names it; a configured database's
    password is the operator's to give, so no line is printed for it."""
    if not settings.uses_embedded_database:
        return None
    from judgeflow.db.embedded import EmbeddedPostgres

    server = EmbeddedPostgres.for_settings(settings)
    url = server.public_url.replace("postgresql+psycopg://", "postgresql://")
    return f"PGPASSFILE={server.password_file} psql {url}"


def _kind(rule: str) -> str | None:
    from judgeflow.alerts.rules import rule_specs

    return {spec.name: spec.kind for spec in rule_specs()}.get(rule)


def _sample_unit(rule: str) -> str:
    """What a rule's sample counts: alert deliveries for dead_delivery_rate, sessions for a session metric's
    rules, traces for the others."""
    from judgeflow.alerts.rules import rule_specs
    from judgeflow.metrics.registry import unit_of

    if _kind(rule) == "dead_deliveries":
        return "deliveries"
    metric = {spec.name: spec.metric for spec in rule_specs()}.get(rule)
    return "traces" if metric is None else unit_of(metric)


def _limit(alert: dict, hysteresis: float) -> str:
    """A regression rule's smallest rise that pages; a maximum rule's line, and, firing at or below it,
    that hysteresis holds it (the same words as `judgeflow alerts`)."""
    if _kind(alert["rule"]) == "regression":
        return f"minimum rise +{_pct(alert['threshold'])} over its baseline"
    line = f"maximum {_pct(alert['threshold'])}"
    value, maximum = alert["value"], alert["threshold"]
    if alert["state"] == "firing" and value is not None and maximum is not None and value <= maximum:
        line += f", held by hysteresis until at or below {_pct(maximum * (1 - hysteresis))}"
    return line


def build_report(settings: Settings) -> DemoReport:
    report = DemoReport(database=redact(database_url(settings)), psql=_psql_command(settings),
                        embedded_database=settings.embedded_database, hysteresis=settings.alert_hysteresis)
    with engine_for(settings).connect() as conn:
        report.traces = conn.execute(text("SELECT count(*) FROM llm_traces")).scalar_one()
        for metric, status, n, not_passed in conn.execute(
            text(
                "SELECT metric, status, count(*), count(*) FILTER (WHERE passed IS FALSE) "
                "FROM judgeflow.eval_results GROUP BY metric, status"
            )
        ):
            getattr(report, status)[metric] = n
            if status == "scored":
                report.fail_rate[metric] = not_passed / n if n else None
        report.skip_reasons = dict(conn.execute(text(
            "SELECT DISTINCT ON (metric) metric, reason FROM judgeflow.eval_results WHERE status = 'skipped' "
            "GROUP BY metric, reason ORDER BY metric, count(*) DESC, reason")).all())
        report.judge_models = [
            m for (m,) in conn.execute(text("SELECT DISTINCT judge_model FROM judgeflow.eval_results "
                                            "WHERE judge_model IS NOT NULL ORDER BY 1"))
        ]
        has_alerts = conn.execute(text("SELECT to_regclass('judgeflow.alerts') IS NOT NULL")).scalar_one()
        if has_alerts:
            report.alerts = [
                dict(r)
                for r in conn.execute(
                    text("SELECT rule, state, value, threshold, sample_size, opened_at FROM judgeflow.alerts ORDER BY rule")
                ).mappings()
            ]
        report.worst = [
            dict(r)
            for r in conn.execute(
                text(
                    """
                    SELECT r.trace_id, r.metric, r.score, r.reason, left(t.output, 90) AS output
                    FROM judgeflow.eval_results r JOIN llm_traces t ON t.id = r.trace_id
                    WHERE r.status = 'scored' AND r.passed IS FALSE
                    ORDER BY CASE WHEN r.metric = ANY(:upward) THEN 1 - r.score ELSE r.score END DESC,
                             (r.metric = 'toxicity') DESC, r.trace_created_at DESC
                    LIMIT 5
                    """
                ),
                # a metric whose higher score is better is worst at its lowest score
                {"upward": [name for name, spec in registered().items() if spec.higher_is_better]},
            ).mappings()
        ]
    return report


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _prefect_line(ui_url: str | None, flow_run_id: str | None) -> str:
    if not ui_url:
        return "Prefect UI: the configured Prefect server's (PREFECT_API_URL)"
    if not flow_run_id:
        return f"Prefect UI: {ui_url}/runs"
    return f"this run in the Prefect UI: {ui_url}/runs/flow-run/{flow_run_id}"


def render(report: DemoReport, *, judge_note: str, ui_url: str | None, flow_run_id: str | None,
           ran_s: float) -> str:
    lines = [
        "",
        "judgeflow demo: summary",
        "=======================",
        f"judge: {judge_note}",
        f"traces in llm_traces: {report.traces}",
    ]
    for metric in metric_names():
        lines.append(
            f"{metric:<14} scored {report.scored.get(metric, 0):>4}   failed {report.failed.get(metric, 0):>3}   "
            f"skipped {report.skipped.get(metric, 0):>4}   failing rate {_pct(report.fail_rate.get(metric))}"
        )
        if report.skipped.get(metric) and not report.scored.get(metric) and report.skip_reasons.get(metric):
            lines.append(f"{'':<14} skipped: {report.skip_reasons[metric]}")
    lines.append("")
    if not report.alerts:
        lines.append("alerts: no rule evaluated yet")
    for alert in report.alerts:
        state = str(alert["state"]).upper()
        lines.append(
            f"alert {alert['rule']}: {state}  (rate {_pct(alert['value'])} over {alert['sample_size']} "
            f"{_sample_unit(alert['rule'])} "
            f"in the window, {_limit(alert, report.hysteresis)})"
        )
    lines += ["", "five worst traces:"]
    for row in report.worst:
        reason = " ".join(str(row["reason"] or "").split())[:160]
        lines.append(f"  {row['trace_id']}  {row['metric']:<13} score {row['score']:.2f}  {reason}")
        lines.append(f"      output: {row['output']!r}")
    lines += [
        "",
        f"results: table judgeflow.eval_results in {report.database}",
        # the demo's own database (judgeflow/demo/run.py): the user's commands read theirs unless told
        f"  browse:  JUDGEFLOW_EMBEDDED_DATABASE={report.embedded_database} .venv/bin/judgeflow status",
        *([f"  psql:    {report.psql}"] if report.psql else []),
        _prefect_line(ui_url, flow_run_id),
        "embedded database and Prefect server left running; stop both with: .venv/bin/judgeflow stop",
        f"demo finished in {ran_s:.0f} s",
    ]
    return "\n".join(lines)
