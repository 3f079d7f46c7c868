"""The notification outbox: at-least-once delivery, per channel.

A notification is an ``alert_events`` row holding the payload to send and a
stable ``delivery_id``. :func:`add_deliveries` gives it one ``alert_deliveries``
row per channel configured at the time, in the same transaction as the state
change it announces, so a notification is never committed without its
deliveries and never sent before it is committed.

:func:`deliver_pending` runs after that commit, at every evaluation (scoring
runs and ``judgeflow alerts check``). It sends every *due* pending delivery and
marks it delivered only when the channel confirms; a failed attempt (after the
channel's in-process retries) stays pending, with ``next_attempt_at`` pushed
back exponentially (``JUDGEFLOW_ALERT_REDELIVERY_BACKOFF_S`` doubling up to
``JUDGEFLOW_ALERT_REDELIVERY_BACKOFF_MAX_S``). A process killed between the
commit and the send, or during it, leaves the delivery pending: the next
evaluation sends it, with the same delivery id, so receivers drop a duplicate.

Dead letters: a delivery the channel refuses for good (a 4xx other than 408,
425, 429) is ``dead`` at once; one that failed in ``JUDGEFLOW_ALERT_DEAD_AFTER``
evaluations is ``dead`` then. A dead delivery is not retried and no longer
holds back its queue; it is reported on every path, whatever its channel,
and the ``dead_delivery_rate`` rule pages about it (:mod:`judgeflow.alerts.dead_letters`);
a "resolved" sent where its "fired" died says so.

Time: one evaluation spends at most ``JUDGEFLOW_ALERT_DELIVERY_BUDGET_S``
delivering (each request's timeout is cut to what is left); what it does not
attempt stays pending, untouched, not counted as a failed try. A Prefect
event with no Prefect API in this process is not attempted either.

Ordering and superseding, per (rule, segment) and channel (a segment's
notifications are a queue of their own: a segment firing never waits behind
another segment's undelivered ones):

- deliveries go out in notification order; a channel stops at the first
  failure, so a ``resolved`` never overtakes the ``fired`` it resolves (a
  dead one is passed over: it will never be delivered);
- a new notification supersedes undelivered *reminders* of the same rule (a
  newer notification says more); they are not sent;
- a ``resolved`` (or a new ``fired``) after an undelivered ``fired`` makes that
  ``fired`` due at once, whatever its backoff: both are then sent, in order.

Channels are independent: each has its own rows, so one channel failing
neither blocks nor repeats another.

Nothing here depends on a rule's shape: any notification is an
``alert_events`` row with a ``payload`` (what every channel is sent) and a
``rule`` value, which is the alert's identity for ordering and superseding -
an alert kind with several alerts per rule (per segment, say) gives each its
own ``rule`` value, or their notifications share one queue per channel.

Two evaluators at once: each (rule, channel) queue is sent under a PostgreSQL
transaction advisory lock taken with ``pg_try_advisory_xact_lock`` on a second
connection whose transaction stays open while the queue is sent (it reads
nothing and writes nothing, so it holds back no vacuum); the second evaluator
skips a queue the first is sending. A killed process frees it the moment its
connection drops (no lease to wait out). A transaction lock, not a session
one: behind a transaction pooler (PgBouncer's ``pool_mode = transaction``) a
session lock is taken on one server connection and released on another,
which another client then holds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Collection

from sqlalchemy import Connection, Engine, func, select, text, update

from judgeflow.alerts.dead_letters import fired_delivery_died
from judgeflow.alerts.notify import BUDGET_SPENT, CHANNELS, ChannelResult, Notifier, with_dead_fired
from judgeflow.db.alert_tables import alert_deliveries as d
from judgeflow.db.alert_tables import alert_events as e
from judgeflow.db.alert_tables import alerts
from judgeflow.config.settings import Settings

log = logging.getLogger("judgeflow.alerts")


@dataclass(frozen=True)
class Sent:
    """One delivery tried by :func:`deliver_pending`."""

    event_id: int
    delivery_id: str
    rule: str
    kind: str
    channel: str
    status: str  # delivered | failed | skipped | dead | deferred (not attempted: no Prefect API, no time left)
    attempts: int  # requests made in this evaluation
    tries: int  # evaluations that have tried it, this one included
    error: str | None
    segment_key: str = ""  # '' overall, 'app=B' a segment


# --- writing, inside the evaluation's transaction --------------------------------


def add_deliveries(
    conn: Connection, *, event_id: int, rule: str, kind: str, channels: list[str], segment_key: str = ""
) -> None:
    """Queue notification ``event_id`` on ``channels`` and close what it supersedes.

    Runs in the transaction that created the notification (under the rule's row lock)."""
    earlier = conn.execute(
        select(d.c.event_id, d.c.channel, e.c.kind)
        .select_from(d.join(e, e.c.id == d.c.event_id))
        .where(e.c.rule == rule, e.c.segment_key == segment_key, d.c.status == "pending", d.c.event_id < event_id)
        .order_by(d.c.event_id, d.c.channel)
        .with_for_update(of=d)  # same order as every writer: no deadlock
    ).all()
    stale = sorted({r.event_id for r in earlier if r.kind == "reminder"})
    kept = sorted({r.event_id for r in earlier if r.kind != "reminder"})
    if stale:
        conn.execute(
            update(d)
            .where(d.c.event_id.in_(stale), d.c.status == "pending")
            .values(status="superseded", detail=f"superseded by notification {event_id} ({kind})")
        )
    if kept:
        # the newer notification must not wait behind the older one's backoff
        conn.execute(update(d).where(d.c.event_id.in_(kept), d.c.status == "pending").values(next_attempt_at=func.now()))
    if stale or kept:
        conn.execute(
            update(e).where(e.c.id.in_(stale + kept), e.c.superseded_by.is_(None)).values(superseded_by=event_id)
        )
    if channels:
        conn.execute(d.insert(), [dict(event_id=event_id, channel=c) for c in channels])
    for touched in [*stale, *kept, event_id]:
        summarise(conn, touched)


def summarise(conn: Connection, event_id: int) -> dict[str, Any]:
    """Write the per-channel state of one notification onto its ``alert_events``
    row (and the rule's row, if it is the rule's latest notification); returns it."""
    rows = sorted(
        conn.execute(select(d).where(d.c.event_id == event_id)).all(),
        key=lambda r: (CHANNELS.index(r.channel) if r.channel in CHANNELS else len(CHANNELS), r.channel),
    )
    deliveries = {r.channel: channel_view(r) for r in rows}
    considered = [r for r in rows if r.status != "skipped"]
    delivered = [r for r in considered if r.status == "delivered"]
    pending = [r for r in considered if r.status == "pending"]
    superseded = [r for r in considered if r.status == "superseded"]
    dead = [r for r in considered if r.status == "dead"]
    if not considered:
        status = "skipped"
    elif pending:
        status = "partial" if delivered else ("failed" if any(r.tries for r in pending) else "pending")
    elif dead:
        status = "partial" if delivered else "dead"
    elif superseded:
        status = "partial" if delivered else "superseded"
    else:
        status = "delivered"
    values = dict(
        delivery_status=status,
        delivered_at=max((r.delivered_at for r in delivered), default=None),
        delivery_error="; ".join(
            f"{r.channel}: {'dead: ' if r.status == 'dead' and status != 'dead' else ''}{r.last_error}"
            for r in pending + dead if r.last_error
        ) or None,
        delivery_attempts=sum(r.attempts for r in rows),
    )
    conn.execute(update(e).where(e.c.id == event_id).values(**values, deliveries=deliveries))
    conn.execute(update(alerts).where(alerts.c.last_event_id == event_id).values(**values))
    return dict(values, deliveries=deliveries)


def channel_view(row: Any) -> dict[str, Any]:
    """How one channel's delivery stands, as reported (``failed``: tried, still being retried)."""
    status = row.status
    if status == "pending" and row.tries:
        status = "failed"
    return {
        "status": status,
        "attempts": row.attempts,
        "tries": row.tries,
        "http_status": row.http_status,
        "error": row.last_error,
        "detail": row.detail,
    }


# --- sending, after the commit ---------------------------------------------------


def redelivery_delay_s(settings: Settings, tries: int) -> float:
    """How long after its ``tries``-th failed evaluation a delivery is due again."""
    base, cap = settings.alert_redelivery_backoff_s, settings.alert_redelivery_backoff_max_s
    return min(base * 2 ** max(tries - 1, 0), cap)


def _lock_key(rule: str, segment_key: str, channel: str) -> str:
    return f"judgeflow.alert_delivery:{rule}:{segment_key}:{channel}"


def deliver_pending(
    engine: Engine, notifier: Notifier, settings: Settings, *, force: bool = False, deadline: float | None = None,
    rules: Collection[str] | None = None,
) -> list[Sent]:
    """Send every due pending delivery (all of them when ``force``), in order per
    rule and channel, until ``deadline`` (``time.monotonic()``); record each
    outcome as it happens. What is not attempted before the deadline stays
    pending, untouched. ``rules``: only those rules' queues. Never raises for a channel's failure; database errors propagate.

    Prefect events go first: each queue's events are emitted, then all of them
    are confirmed together against the Prefect API (one wait for the server's
    batched writes instead of one per event); then the HTTP channels, the queue
    due longest first, so a receiver that eats the time budget does not starve
    the same queues at every evaluation."""
    sent: list[Sent] = []
    with engine.connect() as conn, engine.connect() as lock_conn:
        # every statement commits on its own: an outcome is recorded the moment it
        # is known, and no transaction stays open while a channel is slow
        conn.execution_options(isolation_level="AUTOCOMMIT")
        queues = conn.execute(
            select(e.c.rule, e.c.segment_key, d.c.channel, func.min(d.c.next_attempt_at).label("due_at"))
            .select_from(d.join(e, e.c.id == d.c.event_id))
            .where(d.c.status == "pending", True if rules is None else e.c.rule.in_(list(rules)))
            .group_by(e.c.rule, e.c.segment_key, d.c.channel)
        ).all()
        queues = sorted(queues, key=lambda q: (q.channel != "prefect_event", q.due_at, q.rule, q.segment_key, q.channel))
        events = [q for q in queues if q.channel == "prefect_event"]
        others = [q for q in queues if q.channel != "prefect_event"]

        emitted: list[_Emitted] = []
        held = lock_conn.begin()  # the event queues' locks last until it ends
        try:
            for queue in events:
                if not _lock(lock_conn, queue):
                    continue  # another evaluator is sending this queue right now
                done, out = _send_queue(conn, notifier, settings, queue, force=force, deadline=deadline)
                sent += done
                emitted += out
            sent += _confirm(conn, notifier, settings, emitted, deadline)
        finally:
            held.close()

        _announce_dead(notifier, sent)
        for number, queue in enumerate(others):
            if deadline is not None and time.monotonic() >= deadline:
                log.warning(
                    "alert delivery: %d queue(s) left pending for the next evaluation: %s",
                    len(others) - number, BUDGET_SPENT,
                )
                break
            with lock_conn.begin():  # the queue's lock lasts until this transaction ends
                if not _lock(lock_conn, queue):
                    continue
                done, _ = _send_queue(conn, notifier, settings, queue, force=force, deadline=deadline)
                sent += done
                _announce_dead(notifier, done)
    return sent


def _announce_dead(notifier: Notifier, sent: list[Sent]) -> None:
    for s in sent:
        if s.status == "dead":
            notifier.announce_dead(delivery_id=s.delivery_id, channel=s.channel, rule=s.rule,
                                   segment_key=s.segment_key, notification=s.kind, error=s.error)


@dataclass(frozen=True)
class _Emitted:
    """A Prefect event emitted by this evaluation, to be confirmed."""

    event_id: int
    delivery_id: str
    event_key: str  # the Prefect event's id (the delivery id)
    rule: str
    segment_key: str
    kind: str
    tries: int  # before this evaluation
    attempts: int


def _lock(lock_conn: Connection, queue: Any) -> bool:
    """The queue's lock, held until ``lock_conn``'s transaction ends, if no other evaluator holds it."""
    key = _lock_key(queue.rule, queue.segment_key, queue.channel)
    return bool(lock_conn.execute(select(func.pg_try_advisory_xact_lock(func.hashtextextended(key, 0)))).scalar_one())


def _send_queue(
    conn: Connection, notifier: Notifier, settings: Settings, queue: Any, *, force: bool, deadline: float | None,
) -> tuple[list[Sent], list[_Emitted]]:
    rule, segment_key, channel = queue.rule, queue.segment_key, queue.channel
    # read under the lock: another evaluator may have sent (or failed) these just now
    rows = conn.execute(
        select(
            d.c.event_id, d.c.tries, d.c.next_attempt_at, e.c.kind, e.c.payload, e.c.delivery_id,
            (d.c.next_attempt_at <= func.clock_timestamp()).label("due"),
        )
        .select_from(d.join(e, e.c.id == d.c.event_id))
        .where(e.c.rule == rule, e.c.segment_key == segment_key, d.c.channel == channel, d.c.status == "pending")
        .order_by(d.c.event_id)
    ).all()
    if not rows or not (force or rows[0].due):
        return [], []
    sent: list[Sent] = []
    emitted: list[_Emitted] = []
    for row in rows:
        if row.payload is None:  # a notification from before the outbox existed: nothing to send
            result = ChannelResult(channel, "skipped", detail="no stored payload")
        else:
            result = notifier.send(channel, _as_sent(conn, row, rule, segment_key, channel), deadline=deadline)
        if result.status == "deferred":  # not attempted: stays pending as it is, and so do the ones behind it
            sent.append(Sent(
                event_id=row.event_id, delivery_id=str(row.delivery_id), rule=rule, kind=row.kind, channel=channel,
                status="deferred", attempts=0, tries=row.tries, error=None, segment_key=segment_key,
            ))
            break
        if result.status == "sent":  # a Prefect event, delivered once the API confirms it (_confirm)
            conn.execute(
                update(d)
                .where(d.c.event_id == row.event_id, d.c.channel == channel, d.c.status == "pending")
                .values(attempts=d.c.attempts + result.attempts, last_attempt_at=func.now(), detail=result.detail)
            )
            emitted.append(_Emitted(
                event_id=row.event_id, delivery_id=str(row.delivery_id), event_key=result.detail or str(row.delivery_id),
                rule=rule, segment_key=segment_key, kind=row.kind, tries=row.tries, attempts=result.attempts,
            ))
            continue
        tries = row.tries + (1 if result.attempts else 0)
        status = _record(conn, settings, row.event_id, channel, result, tries)
        summarise(conn, row.event_id)
        sent.append(Sent(
            event_id=row.event_id, delivery_id=str(row.delivery_id), rule=rule, kind=row.kind, channel=channel,
            status=status, attempts=result.attempts, tries=tries, error=result.error, segment_key=segment_key,
        ))
        if status == "failed":
            break  # later notifications of this (rule, segment) wait: order is kept per channel
    return sent, emitted


def _as_sent(conn: Connection, row: Any, rule: str, segment_key: str, channel: str) -> dict[str, Any]:
    """The payload as ``channel`` gets it: a "resolved" whose "fired" died on it says so."""
    if row.kind != "resolved":
        return row.payload
    fired = fired_delivery_died(conn, rule=rule, segment_key=segment_key, channel=channel,
                                before_event_id=row.event_id)
    return row.payload if fired is None else with_dead_fired(row.payload, fired)


def _confirm(
    conn: Connection, notifier: Notifier, settings: Settings, emitted: list[_Emitted], deadline: float | None,
) -> list[Sent]:
    """Record the emitted Prefect events the API confirms as delivered, the
    others as a failed try (emitted again, with the same id, next time)."""
    if not emitted:
        return []
    confirmed, reason = notifier.confirm_events([x.event_key for x in emitted], deadline=deadline)
    sent = []
    for x in emitted:
        if x.event_key in confirmed:
            result = ChannelResult("prefect_event", "delivered", attempts=0, detail=x.event_key)
        else:
            result = ChannelResult("prefect_event", "failed", attempts=0, error=reason, detail=x.event_key)
        status = _record(conn, settings, x.event_id, "prefect_event", result, x.tries + 1)
        summarise(conn, x.event_id)
        sent.append(Sent(
            event_id=x.event_id, delivery_id=x.delivery_id, rule=x.rule, kind=x.kind, channel="prefect_event",
            status=status, attempts=x.attempts, tries=x.tries + 1, error=result.error, segment_key=x.segment_key,
        ))
    return sent


def _record(
    conn: Connection, settings: Settings, event_id: int, channel: str, result: ChannelResult, tries: int
) -> str:
    """Write one delivery's outcome; returns its status: delivered, skipped,
    failed (pending, retried later) or dead (a permanent refusal, or
    ``JUDGEFLOW_ALERT_DEAD_AFTER`` failed evaluations)."""
    where = (d.c.event_id == event_id) & (d.c.channel == channel)
    common = dict(
        tries=tries,
        attempts=d.c.attempts + result.attempts,
        last_attempt_at=func.now() if result.attempts else d.c.last_attempt_at,
        http_status=result.http_status,
        detail=result.detail,
    )
    if result.status == "delivered":
        # even if superseded meanwhile: it did arrive
        conn.execute(update(d).where(where).values(**common, status="delivered", delivered_at=func.now(), last_error=None))
        return "delivered"
    if result.status == "skipped":
        conn.execute(update(d).where(where, d.c.status == "pending").values(**common, status="skipped", last_error=None))
        return "skipped"
    if result.permanent or tries >= settings.alert_dead_after:
        why = "refused for good" if result.permanent else f"failed in {tries} evaluations"
        conn.execute(
            update(d)
            .where(where, d.c.status == "pending")
            .values(**dict(common, detail=f"dead: {why}; not retried, its queue moves on"), status="dead",
                    dead_at=func.now(), last_error=result.error)
        )
        return "dead"
    delay = timedelta(seconds=redelivery_delay_s(settings, tries))
    conn.execute(
        update(d)
        .where(where, d.c.status == "pending")
        .values(**common, last_error=result.error, next_attempt_at=func.now() + delay)
    )
    return "failed"


# --- reading, for `judgeflow alerts` ------------------------------------------


def undelivered(conn: Connection, *, limit: int = 50) -> list:
    """Pending deliveries, oldest first, with their notification."""
    return list(conn.execute(
        select(
            d.c.event_id, d.c.channel, d.c.tries, d.c.attempts, d.c.last_attempt_at, d.c.next_attempt_at,
            d.c.last_error, e.c.rule, e.c.segment_key, e.c.kind, e.c.occurred_at, e.c.delivery_id,
        )
        .select_from(d.join(e, e.c.id == d.c.event_id))
        .where(d.c.status == "pending")
        .order_by(d.c.event_id, d.c.channel)
        .limit(limit)
    ))


def outbox_exists(conn: Connection) -> bool:
    return bool(conn.execute(text("SELECT to_regclass('judgeflow.alert_deliveries') IS NOT NULL")).scalar())
