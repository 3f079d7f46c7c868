"""Evaluate every enabled rule, notify, record deliveries. Used by the
``evaluate-alert-rules`` task (end of each scoring run) and ``judgeflow alerts check``."""

from __future__ import annotations

import logging
from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import Engine

from judgeflow.alerts.notify import DeliveryReport, Notifier, build_payload
from judgeflow.alerts.rules import Rule, all_rules
from judgeflow.alerts.state import Decision, evaluate_rule, record_delivery
from judgeflow.settings import Settings

log = logging.getLogger("judgeflow.alerts")


class RuleEvaluation(BaseModel):
    """One rule's evaluation: what the window holds, the state, and the
    notification sent (if any) with how its delivery went."""

    rule: str
    metric: str | None
    enabled: bool = True
    outcome: str | None = None  # ok | firing | not_enough_data (None: disabled)
    state: str | None = None  # ok | firing
    state_before: str | None = None
    transition: str | None = None  # fired | reminder | resolved
    value: float | None = None
    threshold: float | None = None
    window: str
    sample_size: int = 0
    min_samples: int
    violations: int = 0
    failed_count: int = 0
    evaluated_at: datetime | None = None
    alert_event_id: int | None = None
    delivery_status: str | None = None  # delivered | partial | failed | skipped
    delivery_error: str | None = None
    deliveries: dict = {}

    @classmethod
    def disabled(cls, rule: Rule) -> "RuleEvaluation":
        return cls(rule=rule.name, metric=rule.metric, enabled=False, window=rule.window, min_samples=rule.min_samples)

    @classmethod
    def from_decision(cls, d: Decision, report: DeliveryReport | None) -> "RuleEvaluation":
        f = d.figures
        return cls(
            rule=d.rule.name,
            metric=d.rule.metric,
            outcome=d.outcome,
            state=d.state,
            state_before=d.state_before,
            transition=d.transition,
            value=f.value,
            threshold=d.rule.maximum,
            window=d.rule.window,
            sample_size=f.sample_size,
            min_samples=d.rule.min_samples,
            violations=f.violations,
            failed_count=f.failed,
            evaluated_at=f.evaluated_at,
            alert_event_id=d.alert_event_id,
            delivery_status=report.status if report else None,
            delivery_error=report.error if report else None,
            deliveries=report.as_json() if report else {},
        )

    @property
    def summary(self) -> str:
        if not self.enabled:
            return "disabled"
        if self.outcome == "not_enough_data":
            return f"not enough data ({self.sample_size}/{self.min_samples} samples)"
        return f"{self.state.upper()} ({_pct(self.value)} vs max {_pct(self.threshold)}, {self.sample_size} samples)"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def run_url(flow_run_id: str | None) -> str | None:
    if not flow_run_id:
        return None
    try:
        from prefect.settings import get_current_settings

        ui = get_current_settings().ui_url
    except Exception:
        return None
    return f"{str(ui).rstrip('/')}/runs/flow-run/{flow_run_id}" if ui else None


def evaluate_rules(
    settings: Settings,
    *,
    engine: Engine | None = None,
    flow_run_id: str | None = None,
    notifier: Notifier | None = None,
    include_disabled: bool = False,
) -> list[RuleEvaluation]:
    """Evaluate each enabled rule (one locked transaction each), then deliver the
    notifications that were claimed and record how that went.

    Database errors propagate; delivery errors never do."""
    if engine is None:
        from judgeflow.db.engine import engine_for

        engine = engine_for(settings)
    notifier = notifier or Notifier(settings)
    results: list[RuleEvaluation] = []
    for rule in all_rules(settings):
        if not rule.enabled:
            if include_disabled:
                results.append(RuleEvaluation.disabled(rule))
            continue
        decision = evaluate_rule(engine, rule, flow_run_id=flow_run_id)
        report = None
        if decision.notify:
            payload = build_payload(decision, run_url=run_url(flow_run_id))
            report = notifier.deliver(payload)
            try:
                record_delivery(
                    engine, decision.alert_event_id, rule.name,
                    status=report.status, attempts=report.attempts, error=report.error, deliveries=report.as_json(),
                )
            except Exception:  # the notification went out; losing its receipt is not worth failing for
                log.exception("could not record the delivery of alert %s", decision.alert_event_id)
            log_fn = log.warning if report.status in ("failed", "partial") else log.info
            log_fn(
                "alert %s %s: %s %s (value %s, max %s, %d samples); delivery %s%s",
                rule.name, decision.transition, decision.state_before, decision.state,
                _pct(decision.figures.value), _pct(rule.maximum), decision.figures.sample_size,
                report.status, f" ({report.error})" if report.error else "",
            )
        result = RuleEvaluation.from_decision(decision, report)
        if not decision.notify:
            log.info("alert rule %s: %s", rule.name, result.summary)
        results.append(result)
    return results


def render_markdown(evaluations: list[RuleEvaluation]) -> str:
    lines = [
        "# judgeflow alert rules",
        "",
        "| rule | state | last evaluation | value | maximum | samples (min) | failed | window | notification |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in evaluations:
        if not e.enabled:
            lines.append(f"| {e.rule} | disabled | - | - | - | - | - | {e.window} | - |")
            continue
        outcome = "not enough data" if e.outcome == "not_enough_data" else e.outcome
        note = "-"
        if e.transition:
            note = f"{e.transition}, delivery {e.delivery_status}"
            if e.delivery_error:
                note += f": {e.delivery_error}".replace("|", "\\|")
        lines.append(
            f"| {e.rule} | **{(e.state or '').upper()}** | {outcome} | {_pct(e.value)} | {_pct(e.threshold)} | "
            f"{e.sample_size} ({e.min_samples}) | {e.failed_count} | {e.window} | {note} |"
        )
    return "\n".join(lines)
