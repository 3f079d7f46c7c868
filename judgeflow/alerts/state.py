"""The per-rule state machine and its persistence in ``judgeflow.alerts``.

One row per (rule, segment): ``segment_key`` '' is the rule over all results,
'app=B' one segment (:mod:`judgeflow.alerts.evaluation`). One short
transaction per rule:

1. make sure the rule's overall row exists (``INSERT ... ON CONFLICT DO NOTHING``),
2. lock it (``SELECT ... FOR UPDATE``): concurrent evaluators of the same rule
   queue here, so exactly one of them sees any given state of the rule or any
   of its segments,
3. compute the figures overall and per segment, adjust a regression's
   p-values over the segments tested (Holm), and decide each
   (:func:`judgeflow.alerts.lifecycle.decide`, with hysteresis),
4. when a notification is due, write its ``alert_events`` row with the payload
   to send, its outbox rows (one per channel, :mod:`judgeflow.alerts.outbox`)
   and ``last_notified_at`` - this *claims* the notification,
5. commit.

Delivery happens after the commit, outside any lock
(:func:`judgeflow.alerts.outbox.deliver_pending`). A transition is therefore
announced once: an evaluator that comes second sees the new state and the
fresh ``last_notified_at`` and creates nothing. Its delivery is at least once:
what fails, or is interrupted by a crash, stays in the outbox and every later
evaluation tries it again, with the same delivery id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from judgeflow.alerts.evaluation import Counts, Figures, Segment, all_segment_figures, rule_metrics, with_worst
from judgeflow.alerts.lifecycle import Outcome, State, Transition, correct_for_family, decide, evidence
from judgeflow.alerts.rules import Rule
from judgeflow.db.alert_tables import alert_events, alerts
from judgeflow.db.schema import SCHEMA
from judgeflow.db.result_sources import adopt_alert_state
from judgeflow.db.epochs import current_epochs, latest_start


@dataclass(frozen=True)
class Decision:
    rule: Rule
    figures: Figures
    outcome: Outcome
    state_before: State
    state: State
    transition: Transition | None
    alert_event_id: int | None
    opened_at: datetime | None
    resolved_at: datetime | None
    last_notified_at: datetime | None
    flow_run_id: str | None = None
    delivery_id: str | None = None

    @property
    def notify(self) -> bool:
        return self.transition is not None


def evaluate_rule(
    engine: Engine,
    rule: Rule,
    *,
    flow_run_id: str | None = None,
    channels: list[str] | None = None,
    run_url: str | None = None,
) -> Decision:
    """Evaluate one enabled rule (and its segments); returns the overall decision."""
    return evaluate_rule_segments(engine, rule, flow_run_id=flow_run_id, channels=channels, run_url=run_url)[0]


def evaluate_rule_segments(
    engine: Engine,
    rule: Rule,
    *,
    flow_run_id: str | None = None,
    channels: list[str] | None = None,
    run_url: str | None = None,
    counts: Counts | None = None,
) -> list[Decision]:
    """Evaluate one enabled rule overall and per segment, and record each
    (rule, segment)'s outcome, all under the rule's overall row lock: every
    evaluator of a rule takes that lock first, so it also guards the rule's
    segment rows. A notification due is queued for ``channels`` (default: none,
    so it is recorded as 'skipped') in the same transaction. Overall first.
    ``counts``: the evaluation's one read of the rollup, shared by its rules."""
    source = rule.source or ""  # each source has its own alert state
    with engine.begin() as conn:
        if source:
            adopt_alert_state(conn, source)
        conn.execute(
            pg_insert(alerts)
            .values(source=source, rule=rule.name, segment_key="", state="ok")
            .on_conflict_do_nothing(index_elements=["source", "rule", "segment_key"])
        )
        conn.execute(
            select(alerts.c.rule).where(alerts.c.source == source, alerts.c.rule == rule.name,
                                        alerts.c.segment_key == "").with_for_update()
        ).one()
        rows = {r.segment_key: r for r in conn.execute(
            select(alerts).where(alerts.c.source == source, alerts.c.rule == rule.name))}
        # the time after the lock was granted: evaluators serialised on the lock
        # see increasing times (now() would be each transaction's start)
        now = conn.execute(select(func.clock_timestamp())).scalar_one()
        # firing segments stay evaluated (so they can resolve) even outside the top N
        keep: dict[str, tuple[str, ...]] = {}
        for r in rows.values():
            for key, value in (r.segment or {}).items():
                if r.state == "firing" and key in rule.segment_by:
                    keep[key] = keep.get(key, ()) + (value,)
        if counts is not None and any(r.last_evaluated_at is not None and r.last_evaluated_at > counts.now
                                      for r in rows.values()):
            counts = None  # an evaluation that read later has recorded since: count again, as of now
        if counts is not None:  # the evaluation's one read, as of its time
            now = counts.now
        epochs = current_epochs(conn, rule.source) if counts is None else counts.epochs.get(rule.source, {})
        figures = correct_for_family(
            rule, all_segment_figures(conn, rule, now=now, keep=keep, epochs=epochs, counts=counts))
        seen = {f.segment.label for f in figures}
        for r in rows.values():  # a firing segment with no results at all: not enough data, state kept
            if r.segment_key and r.state == "firing" and r.segment_key not in seen and set(r.segment) <= set(rule.segment_by):
                [(key, value)] = r.segment.items()
                figures.append(_empty(rule, Segment(key, value), now, latest_start(epochs, rule_metrics(rule))))
        return [
            _record(conn, rule, f, rows.get(f.segment.label), now=now, flow_run_id=flow_run_id,
                    channels=channels, run_url=run_url)
            for f in figures
        ]


def _empty(rule: Rule, segment: Segment, now: datetime, epoch_started_at: datetime | None = None) -> Figures:
    start = now - timedelta(seconds=rule.window_s)
    return Figures(
        value=None, violations=0, sample_size=0, failed=0, worst=[], evaluated_at=now, window_start=start,
        segment=segment, baseline_start=start - timedelta(seconds=rule.baseline_s),
        epoch_started_at=epoch_started_at,
    )


def _state_row(conn: Connection, rule: Rule, segment: Segment, where):
    """The (rule, segment)'s stored state, an 'ok' row created for it if it has none yet."""
    conn.execute(
        pg_insert(alerts)
        .values(source=rule.source or "", rule=rule.name, segment_key=segment.label, segment=segment.as_json(),
                state="ok")
        .on_conflict_do_nothing(index_elements=["source", "rule", "segment_key"])
    )
    return conn.execute(select(alerts).where(where)).one()


def _measured(rule: Rule, figures: Figures, state: str) -> dict:
    """The figures as both the state row and its events record them."""
    return dict(
        state=state,
        value=figures.value,
        threshold=rule.limit,
        window=rule.window,
        sample_size=figures.sample_size,
        violations=figures.violations,
        failed_count=figures.failed,
        segment=figures.segment.as_json(),
        baseline_value=figures.baseline_value,
        baseline_sample_size=figures.baseline_sample_size,
        baseline_violations=figures.baseline_violations,
        p_value=figures.p_value,
        **evidence(figures),
    )


def _insert_event(conn: Connection, rule: Rule, figures: Figures, measured: dict, *, transition: str,
                  now: datetime, flow_run_id: str | None) -> tuple[int, Any]:
    """The transition's alert event, its delivery pending: (event id, delivery id)."""
    return conn.execute(
        alert_events.insert()
        .values(
            **measured,
            rule=rule.name,
            source=rule.source,
            segment_key=figures.segment.label,
            kind=transition,
            occurred_at=now,
            worst=[w.as_json() for w in figures.worst],
            flow_run_id=flow_run_id,
            delivery_status="pending",
        )
        .returning(alert_events.c.id, alert_events.c.delivery_id)
    ).one()


def _queue_notification(conn: Connection, decision: Decision, event_id: int, *, channels: list[str] | None,
                        run_url: str | None) -> None:
    """The event's payload, and one delivery per channel in the outbox."""
    from judgeflow.alerts.notify import build_payload
    from judgeflow.alerts.outbox import add_deliveries

    conn.execute(
        update(alert_events)
        .where(alert_events.c.id == event_id)
        .values(payload=build_payload(decision, run_url=run_url))
    )
    add_deliveries(
        conn, event_id=event_id, rule=decision.rule.name, segment_key=decision.figures.segment.label,
        kind=decision.transition, channels=list(channels or []),
    )


def _record(
    conn: Connection,
    rule: Rule,
    figures: Figures,
    current,
    *,
    now: datetime,
    flow_run_id: str | None,
    channels: list[str] | None,
    run_url: str | None,
) -> Decision:
    """Decide one (rule, segment) and write its row, and its notification if one is due."""
    segment = figures.segment
    where = (alerts.c.source == (rule.source or "")) & (alerts.c.rule == rule.name) \
        & (alerts.c.segment_key == segment.label)
    if current is None:
        current = _state_row(conn, rule, segment, where)
    state_before = current.state
    outcome, state, transition = decide(
        rule, figures, state=state_before, last_notified_at=current.last_notified_at, now=now
    )

    opened_at, resolved_at, last_notified_at = current.opened_at, current.resolved_at, current.last_notified_at
    if transition == "fired":
        opened_at, resolved_at = now, None
    elif transition == "resolved":
        resolved_at = now
    if transition is not None:
        figures = with_worst(conn, rule, figures)  # the segment's own worst traces

    measured = _measured(rule, figures, state)
    values = dict(
        measured, last_outcome=outcome, min_samples=rule.min_samples, opened_at=opened_at, resolved_at=resolved_at,
        last_evaluated_at=now, updated_at=now, epoch_started_at=figures.epoch_started_at,
    )
    event_id = delivery_id = None
    if transition is not None:
        last_notified_at = now
        event_id, delivery_id = _insert_event(conn, rule, figures, measured, transition=transition, now=now,
                                              flow_run_id=flow_run_id)
        values.update(last_notified_at=now, last_event_id=event_id, delivery_status="pending", delivered_at=None,
                      delivery_error=None, delivery_attempts=0)
    conn.execute(update(alerts).where(where).values(**values))
    decision = Decision(
        rule=rule, figures=figures, outcome=outcome, state_before=state_before, state=state, transition=transition,
        alert_event_id=event_id, opened_at=opened_at, resolved_at=resolved_at, last_notified_at=last_notified_at,
        flow_run_id=flow_run_id, delivery_id=None if delivery_id is None else str(delivery_id),
    )
    if event_id is not None:
        _queue_notification(conn, decision, event_id, channels=channels, run_url=run_url)
    return decision


# --- reading, for `judgeflow alerts` ------------------------------------------


def alert_tables_exist(conn: Connection) -> bool:
    return bool(conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"{SCHEMA}.alerts"}).scalar())


def current_alerts(conn: Connection, source: str | None = None) -> list:
    """Every (rule, segment) row of ``source`` (None: of every source); a rule's
    overall row ('' segment) first."""
    query = select(alerts).order_by(alerts.c.rule, alerts.c.segment_key)
    if source is not None:
        query = query.where(alerts.c.source.in_([source, ""]))
    return list(conn.execute(query))


def alert_history(conn: Connection, *, limit: int = 20, rule: str | None = None, source: str | None = None) -> list:
    query = select(alert_events).order_by(alert_events.c.occurred_at.desc(), alert_events.c.id.desc()).limit(limit)
    if source is not None:
        query = query.where((alert_events.c.source == source) | alert_events.c.source.is_(None))
    if rule is not None:
        query = query.where(alert_events.c.rule == rule)
    return list(conn.execute(query))
