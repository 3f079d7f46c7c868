"""The per-rule state machine and its persistence in ``judgeflow.alerts``.

One short transaction per rule:

1. make sure the rule's row exists (``INSERT ... ON CONFLICT DO NOTHING``),
2. lock it (``SELECT ... FOR UPDATE``): concurrent evaluators of the same rule
   queue here, so exactly one of them sees any given state,
3. compute the figures and decide (:func:`decide`),
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
from datetime import datetime

from sqlalchemy import Connection, Engine, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from judgeflow.alerts.evaluation import Figures, compute_figures
from judgeflow.alerts.lifecycle import Outcome, State, Transition, decide
from judgeflow.alerts.rules import Rule
from judgeflow.db.alert_tables import alert_events, alerts
from judgeflow.db.schema import SCHEMA


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
    """Evaluate one enabled rule and record the outcome, under the rule's row lock.
    A notification due is queued for ``channels`` (default: none, so it is
    recorded as 'skipped') in the same transaction."""
    from judgeflow.alerts.notify import build_payload
    from judgeflow.alerts.outbox import add_deliveries

    with engine.begin() as conn:
        conn.execute(
            pg_insert(alerts).values(rule=rule.name, state="ok").on_conflict_do_nothing(index_elements=["rule"])
        )
        current = conn.execute(select(alerts).where(alerts.c.rule == rule.name).with_for_update()).one()
        # the time after the lock was granted: evaluators serialised on the lock
        # see increasing times (now() would be each transaction's start)
        now = conn.execute(select(func.clock_timestamp())).scalar_one()
        figures = compute_figures(conn, rule, now=now)
        outcome, state, transition = decide(
            rule, figures, state=current.state, last_notified_at=current.last_notified_at, now=now
        )

        opened_at, resolved_at, last_notified_at = current.opened_at, current.resolved_at, current.last_notified_at
        if transition == "fired":
            opened_at, resolved_at = now, None
        elif transition == "resolved":
            resolved_at = now

        # the figures as both the rule's row and its events record them
        measured = dict(
            state=state,
            value=figures.value,
            threshold=rule.maximum,
            window=rule.window,
            sample_size=figures.sample_size,
            violations=figures.violations,
            failed_count=figures.failed,
        )
        values = dict(
            measured,
            last_outcome=outcome,
            min_samples=rule.min_samples,
            opened_at=opened_at,
            resolved_at=resolved_at,
            last_evaluated_at=now,
            updated_at=now,
        )
        event_id = delivery_id = None
        if transition is not None:
            last_notified_at = now
            event_id, delivery_id = conn.execute(
                alert_events.insert()
                .values(
                    **measured,
                    rule=rule.name,
                    kind=transition,
                    occurred_at=now,
                    worst=[w.as_json() for w in figures.worst],
                    flow_run_id=flow_run_id,
                    delivery_status="pending",
                )
                .returning(alert_events.c.id, alert_events.c.delivery_id)
            ).one()
            values.update(
                last_notified_at=now,
                last_event_id=event_id,
                delivery_status="pending",
                delivered_at=None,
                delivery_error=None,
                delivery_attempts=0,
            )
        conn.execute(update(alerts).where(alerts.c.rule == rule.name).values(**values))
        decision = Decision(
            rule=rule,
            figures=figures,
            outcome=outcome,
            state_before=current.state,
            state=state,
            transition=transition,
            alert_event_id=event_id,
            opened_at=opened_at,
            resolved_at=resolved_at,
            last_notified_at=last_notified_at,
            flow_run_id=flow_run_id,
            delivery_id=None if delivery_id is None else str(delivery_id),
        )
        if event_id is not None:
            conn.execute(
                update(alert_events)
                .where(alert_events.c.id == event_id)
                .values(payload=build_payload(decision, run_url=run_url))
            )
            add_deliveries(conn, event_id=event_id, rule=rule.name, kind=transition, channels=list(channels or []))
    return decision


# --- reading, for `judgeflow alerts` ------------------------------------------


def alert_tables_exist(conn: Connection) -> bool:
    return bool(conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"{SCHEMA}.alerts"}).scalar())


def current_alerts(conn: Connection) -> list:
    return list(conn.execute(select(alerts).order_by(alerts.c.rule)))


def alert_history(conn: Connection, *, limit: int = 20, rule: str | None = None) -> list:
    query = select(alert_events).order_by(alert_events.c.occurred_at.desc(), alert_events.c.id.desc()).limit(limit)
    if rule is not None:
        query = query.where(alert_events.c.rule == rule)
    return list(conn.execute(query))
