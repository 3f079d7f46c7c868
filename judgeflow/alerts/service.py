"""Evaluate every enabled rule, then deliver what the outbox holds (the new
notifications and any earlier undelivered ones). Used by the
``evaluate-alert-rules`` task (end of each scoring run) and ``judgeflow alerts check``."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import Engine, func, select

from judgeflow.alerts.evaluation import Counts, read_evaluation_counts
from judgeflow.alerts.lifecycle import evidence
from judgeflow.alerts.notify import Notifier, configured_channels, corrected_fields
from judgeflow.alerts.outbox import Sent, deliver_pending
from judgeflow.alerts.rules import Rule, all_rules
from judgeflow.alerts.state import Decision, evaluate_rule_segments
from judgeflow.config.settings import Settings
from judgeflow.db.rollup import compact_rollup

log = logging.getLogger("judgeflow.alerts")


class RuleEvaluation(BaseModel):
    """One rule's evaluation: what the window holds, the state, and the
    notification sent (if any) with how its delivery went."""

    rule: str
    metric: str | None
    segment: dict[str, str] = {}  # {} overall, {key: value} one segment
    enabled: bool = True
    outcome: str | None = None  # ok | firing | not_enough_data | insufficient_data (None: disabled)
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
    baseline_value: float | None = None
    baseline_sample_size: int = 0
    baseline_violations: int = 0
    p_value: float | None = None
    # the rate's evidence (judgeflow/alerts/lifecycle.py: evidence): its 95% interval,
    # the traffic its results stand for and the effective n the minimum-samples check read
    ci_low: float | None = None
    ci_high: float | None = None
    traffic: float | None = None
    effective_n: float | None = None
    # regression rules: the p-value Holm-adjusted over the segments tested in
    # this evaluation (``tests``), which the decision compared with the alphas
    p_adjusted: float | None = None
    tests: int | None = None
    # a maximum rule firing at or below its maximum is held by hysteresis: it resolves at or below this
    # (maximum * (1 - JUDGEFLOW_ALERT_HYSTERESIS); over sampled results, its 95% interval's upper bound)
    held_until: float | None = None
    # the window's corrected rate (judgeflow/alerts/corrected.py) and which rate the rule decided on:
    # "judged", or "corrected" (JUDGEFLOW_<NAME>_RATE_ON); rate_on_note: why it fell back to the judged
    corrected_rate: float | None = None
    corrected_ci_low: float | None = None
    corrected_ci_high: float | None = None
    labels: int | None = None
    rate_on: str = "judged"
    rate_on_note: str | None = None
    evaluated_at: datetime | None = None
    # when the judge epoch counted started (None: no epoch recorded yet)
    epoch_started_at: datetime | None = None
    alert_event_id: int | None = None
    delivery_id: str | None = None
    # this evaluation's notification: delivered | partial | failed | pending | skipped
    # (failed and partial ones stay in the outbox and are retried)
    delivery_status: str | None = None
    delivery_error: str | None = None
    deliveries: dict = {}
    # earlier undelivered notifications of this rule tried again by this evaluation
    redelivered: list[dict] = []

    @classmethod
    def disabled(cls, rule: Rule) -> "RuleEvaluation":
        return cls(rule=rule.name, metric=rule.metric, enabled=False, window=rule.window, min_samples=rule.min_samples)

    @classmethod
    def from_decision(cls, d: Decision, summary: dict | None, redelivered: list[Sent]) -> "RuleEvaluation":
        f = d.figures
        return cls(
            rule=d.rule.name,
            metric=d.rule.metric,
            segment=f.segment.as_json(),
            outcome=d.outcome,
            state=d.state,
            state_before=d.state_before,
            transition=d.transition,
            value=f.value,
            threshold=d.rule.limit,
            window=d.rule.window,
            sample_size=f.sample_size,
            min_samples=d.rule.min_samples,
            violations=f.violations,
            failed_count=f.failed,
            baseline_value=f.baseline_value,
            baseline_sample_size=f.baseline_sample_size,
            baseline_violations=f.baseline_violations,
            p_value=f.p_value,
            **evidence(f),
            p_adjusted=f.decision_p if d.rule.is_regression else None,
            tests=f.family_size if d.rule.is_regression else None,
            held_until=_held_until(d),
            **corrected_fields(d.rule, f),
            evaluated_at=f.evaluated_at,
            epoch_started_at=f.epoch_started_at,
            alert_event_id=d.alert_event_id,
            delivery_id=d.delivery_id,
            delivery_status=summary["delivery_status"] if summary else None,
            delivery_error=summary["delivery_error"] if summary else None,
            deliveries=summary["deliveries"] if summary else {},
            redelivered=[
                {"alert_id": s.event_id, "notification": s.kind, "channel": s.channel, "status": s.status,
                 "tries": s.tries, "error": s.error}
                for s in redelivered
            ],
        )

    @property
    def segment_label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.segment.items()) or "overall"

    @property
    def is_regression(self) -> bool:
        return self.rule.endswith("_regression")

    @property
    def reason(self) -> str | None:
        """Why the rule could not decide, when the judge changed: "judge changed at <time>"."""
        if self.outcome != "insufficient_data":
            return None
        from judgeflow.db.epochs import when

        return f"judge changed at {when(self.epoch_started_at)}"

    @property
    def summary(self) -> str:
        if not self.enabled:
            return "disabled"
        if self.outcome == "insufficient_data":
            return (
                f"insufficient data: {self.reason} ({self.sample_size}/{self.min_samples} samples of the new judge"
                + (f", baseline {self.baseline_sample_size}" if self.is_regression else "") + ")"
            )
        if self.outcome == "not_enough_data":
            effective = ("" if self.effective_n is None or self.effective_n >= self.sample_size
                         else f"effective n {self.effective_n:.1f} of ")
            return (
                f"not enough data ({effective}{self.sample_size}/{self.min_samples} samples"
                + (f", baseline {self.baseline_sample_size}" if self.is_regression else "") + ")"
            )
        if self.is_regression:
            return (
                f"{self.state.upper()} ({_pct(self.value)} vs baseline {_pct(self.baseline_value)}, "
                f"min increase {_pct(self.threshold)}, p {_p(self.p_value)}{self.adjusted_note}, "
                f"{self.sample_size}/{self.baseline_sample_size} samples)"
            )
        return (f"{self.state.upper()} ({self.rate_said} vs max {_pct(self.threshold)}"
                f"{'; ' + self.held_note if self.held_until is not None else ''}, {self.sample_size} samples)"
                + (f"; {self.rate_on_note}" if self.rate_on_note else ""))

    @property
    def rate_said(self) -> str:
        """The rate a maximum rule decided on, named when it is the corrected one."""
        if self.rate_on != "corrected":
            return _pct(self.value)
        return (f"corrected rate {_pct(self.corrected_rate)} [{_pct(self.corrected_ci_low)}-"
                f"{_pct(self.corrected_ci_high)}] on {self.labels} labels (judged {_pct(self.value)})")

    @property
    def held_note(self) -> str:
        """What a firing rule at or below its maximum says (None of it when it is not held)."""
        return f"held by hysteresis until at or below {_pct(self.held_until)}"

    @property
    def adjusted_note(self) -> str:
        """What the summary adds when the regression was one of several tests: the Holm-adjusted p."""
        if self.p_adjusted is None or not self.tests or self.tests < 2:
            return ""
        return f" (Holm-adjusted {_p(self.p_adjusted)} over {self.tests} segments)"


def _held_until(d: Decision) -> float | None:
    """Where a firing maximum rule at or below its maximum resolves (None: it is not held)."""
    rule, value = d.rule, d.figures.value
    if d.state != "firing" or rule.is_regression or rule.limit is None or value is None or value > rule.limit:
        return None
    return rule.limit * (1.0 - rule.hysteresis)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _p(value: float | None) -> str:
    return "n/a" if value is None else ("<0.0001" if value < 1e-4 else f"{value:.4f}")


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
    redeliver_now: bool = False,
) -> list[RuleEvaluation]:
    """Evaluate each enabled rule (one locked transaction each, which also queues
    the notification due), then deliver every due notification in the outbox
    and record how that went. ``redeliver_now`` ignores the redelivery backoff.
    Delivering takes at most ``JUDGEFLOW_ALERT_DELIVERY_BUDGET_S`` in all.
    The ``dead_deliveries`` rule is evaluated after that delivery (so a delivery
    that died in it counts at once), and its own notification delivered then.

    Database errors propagate; delivery errors never do."""
    if engine is None:
        from judgeflow.db.engine import engine_for

        engine = engine_for(settings)
    decisions, sent = _decide_and_deliver(settings, engine, notifier or Notifier(settings), flow_run_id=flow_run_id,
                                          redeliver_now=redeliver_now)
    for s in sent:
        _log_delivery(s)
    summaries = _summaries(engine, [x.alert_event_id for x in decisions if isinstance(x, Decision) and x.notify])
    results: list[RuleEvaluation] = []
    for item in decisions:
        if isinstance(item, Rule):
            if include_disabled:
                results.append(RuleEvaluation.disabled(item))
            continue
        results.append(_evaluation(item, summaries, sent))
    return results


def _decide_and_deliver(settings: Settings, engine: Engine, notifier: Notifier, *, flow_run_id: str | None,
                        redeliver_now: bool) -> tuple[list[Decision | Rule], list[Sent]]:
    """Every rule decided (a disabled one as itself), the rules on dead deliveries
    after the others' notifications were delivered; and every delivery tried."""
    channels = configured_channels(settings)
    url = run_url(flow_run_id)
    deadline: float | None = None
    decisions: list[Decision | Rule] = []
    sent: list[Sent] = []
    rules = all_rules(settings)
    counts = _read_counts(engine, [r for r in rules if r.enabled])
    for after_delivery in (False, True):
        for rule in rules:
            if (rule.kind == "dead_deliveries") != after_delivery:
                continue
            if not rule.enabled:
                decisions.append(rule)
                continue
            decisions.extend(
                evaluate_rule_segments(engine, rule, flow_run_id=flow_run_id, channels=channels, run_url=url,
                                       counts=counts)
            )
        # after the commits: a crash before or during this leaves the outbox rows pending
        # the second time only the dead-delivery rules' own notifications: the rest was tried just now
        only = {r.name for r in rules if r.kind == "dead_deliveries"} if after_delivery else None
        if deadline is None:  # the budget is for delivering: it starts once the rules are evaluated
            notifier.warm()
            deadline = time.monotonic() + settings.alert_delivery_budget_s
        sent += deliver_pending(engine, notifier, settings, force=redeliver_now, deadline=deadline, rules=only)
    return decisions, sent


def _read_counts(engine: Engine, rules: list[Rule]) -> Counts:
    """Every rule's and segment key's counts in one read of the rollup, as of now
    (its lines of deltas folded first: a scoring run's writes come as such)."""
    compact_rollup(engine)
    with engine.connect() as conn:
        now = conn.execute(select(func.clock_timestamp())).scalar_one()
        return read_evaluation_counts(conn, rules, now=now)


def _log_delivery(s: Sent) -> None:
    log_fn = log.info if s.status in ("delivered", "skipped") else log.warning
    log_fn(
        "alert %s %s (notification %d, delivery %s): %s %s after %d tr%s%s",
        s.rule, s.kind, s.event_id, s.delivery_id, s.channel, s.status, s.tries, "y" if s.tries == 1 else "ies",
        f" ({s.error}); retried at the next evaluation" if s.status == "failed"
        else f" ({s.error}); not retried: see `judgeflow alerts`" if s.status == "dead"
        else "; not attempted, left pending for a later evaluation" if s.status == "deferred" else "",
    )


def _evaluation(decision: Decision, summaries: dict, sent: list[Sent]) -> RuleEvaluation:
    """What one decision reports, with the earlier notifications of its (rule, segment) redelivered now; logged."""
    rule = decision.rule
    summary = summaries.get(decision.alert_event_id) if decision.notify else None
    earlier = [
        s for s in sent
        if s.rule == rule.name and s.segment_key == decision.figures.segment.label
        and s.event_id != decision.alert_event_id
    ]
    result = RuleEvaluation.from_decision(decision, summary, earlier)
    if decision.notify:
        log_fn = log.warning if result.delivery_status in ("failed", "partial") else log.info
        log_fn(
            "alert %s%s %s: %s %s (value %s, %s %s, baseline %s, p %s, %d samples); delivery %s%s",
            rule.name, _in(decision), decision.transition, decision.state_before, decision.state,
            _pct(decision.figures.value), "min increase" if rule.is_regression else "max", _pct(rule.limit),
            _pct(decision.figures.baseline_value), _p(decision.figures.p_value), decision.figures.sample_size,
            result.delivery_status, f" ({result.delivery_error})" if result.delivery_error else "",
        )
    else:
        log.info("alert rule %s%s: %s", rule.name, _in(decision), result.summary)
    return result


def _in(decision: Decision) -> str:
    label = decision.figures.segment.label
    return f" [{label}]" if label else ""


def _summaries(engine: Engine, event_ids: list[int]) -> dict[int, dict]:
    if not event_ids:
        return {}
    from sqlalchemy import select

    from judgeflow.db.alert_tables import alert_events

    with engine.connect() as conn:
        rows = conn.execute(
            select(
                alert_events.c.id, alert_events.c.delivery_status, alert_events.c.delivery_error,
                alert_events.c.deliveries,
            ).where(alert_events.c.id.in_(event_ids))
        ).all()
    return {
        r.id: {"delivery_status": r.delivery_status, "delivery_error": r.delivery_error, "deliveries": r.deliveries}
        for r in rows
    }


def render_markdown(evaluations: list[RuleEvaluation]) -> str:
    """Each rule overall, and each segment that is firing or just changed state;
    the other segments are counted under their rule."""
    lines = [
        "# judgeflow alert rules",
        "",
        "| rule | segment | state | last evaluation | value | baseline | limit | p (rise) | samples (baseline; min) "
        "| failed | window | notification |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    quiet: dict[str, int] = {}
    for e in evaluations:
        if not e.enabled:
            lines.append(f"| {e.rule} | - | disabled | - | - | - | - | - | - | - | {e.window} | - |")
            continue
        if e.segment and e.state != "firing" and not e.transition:
            quiet[e.rule] = quiet.get(e.rule, 0) + 1
            continue
        outcome = {"not_enough_data": "not enough data",
                   "insufficient_data": f"insufficient data: {e.reason}"}.get(e.outcome, e.outcome)
        note = "-"
        if e.transition:
            note = f"{e.transition}, delivery {e.delivery_status}"
            if e.delivery_error:
                note += f": {e.delivery_error}"
        earlier = [f"earlier {r['notification']} #{r['alert_id']} via {r['channel']}: {r['status']}" for r in e.redelivered]
        if earlier:
            note = "; ".join(([] if note == "-" else [note]) + earlier)
        limit = f"min rise +{_pct(e.threshold)}" if e.is_regression else f"max {_pct(e.threshold)}"
        held = f" ({e.held_note})" if e.held_until is not None else ""
        if e.rate_on_note:  # a rule set to the corrected rate without enough labels: it read the judged one
            outcome += f" ({e.rate_on_note})"
        cells = [
            e.rule, e.segment_label, f"**{(e.state or '').upper()}**{held}", outcome, e.rate_said, _pct(e.baseline_value),
            limit, _p(e.p_value), f"{e.sample_size} ({e.baseline_sample_size}; {e.min_samples})", str(e.failed_count),
            e.window, note,
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if quiet:
        lines += ["", "Segments evaluated and OK (not listed): "
                  + ", ".join(f"{rule}: {n}" for rule, n in quiet.items())]
    return "\n".join(lines)
