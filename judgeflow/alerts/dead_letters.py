"""Dead alert deliveries: given up on, and the rule that pages about them.

A delivery is *dead* when its channel answered a permanent 4xx (anything but
408, 425 and 429: retrying the same request cannot help), or after
``JUDGEFLOW_ALERT_DEAD_AFTER`` evaluations that tried it and failed
(:func:`judgeflow.alerts.outbox.deliver_pending`). It is no longer retried and
no longer holds back the later notifications of its (rule, segment, channel)
queue; ``judgeflow alerts`` lists it with its last error.

A dead delivery is also reported whatever the channel, since the channel that
died may be the one every page goes to: a log line (``judgeflow.alerts``, error
level), a Prefect event ``judgeflow.alert.delivery.dead`` (whenever a Prefect API
is reachable, whether or not alerts go out as Prefect events; its id is
:func:`dead_event_id`, the same for every report of one delivery), and a line
in `judgeflow alerts` and `judgeflow status` (:func:`dead_summary`). A
"resolved" sent on a channel where the "fired" it resolves died carries a
note saying so (:func:`fired_delivery_died`,
:func:`judgeflow.alerts.notify.with_dead_fired`).

The ``dead_delivery_rate`` rule (kind ``dead_deliveries``) makes that visible
where every other condition is: it is the share of the deliveries ended in
the window (delivered or dead, by when they ended) that are dead, counting the
deliveries of the source's own alerts only (a source never pages about
another's), with a maximum of 0 by default, so one dead delivery fires it and
it resolves once no delivery has died within the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from uuid import UUID, uuid5

from sqlalchemy import Connection, text

DEAD_EVENT = "judgeflow.alert.delivery.dead"
_DEAD_EVENT_NAMESPACE = UUID("6f1c2f4e-5b0a-4d57-9a7e-2d4c1f0b9e31")

# a delivery is its source's through its notification (alert_events.source; NULL:
# from before sources were recorded, counted as the configured source's)
_OWN = ("EXISTS (SELECT 1 FROM judgeflow.alert_events e WHERE e.id = d.event_id "
        "AND (e.source = :source OR e.source IS NULL))")
_COUNTS = text(
    f"""
    SELECT
        (SELECT count(*) FROM judgeflow.alert_deliveries d
          WHERE status = 'dead' AND dead_at >= :start AND {_OWN}) AS dead,
        (SELECT count(*) FROM judgeflow.alert_deliveries d
          WHERE status = 'delivered' AND delivered_at >= :start AND {_OWN}) AS delivered,
        (SELECT count(*) FROM judgeflow.alert_deliveries d WHERE status = 'pending' AND tries > 0 AND {_OWN}) AS failing
    """
)


def dead_delivery_counts(conn: Connection, *, start: datetime, source: str | None) -> tuple[int, int, int]:
    """(dead, ended, failing) of ``source``'s deliveries: those that died in the
    window, those ended in it (delivered or dead), and those still being retried;
    the rule's rate is dead / ended (:func:`judgeflow.alerts.evaluation.segment_figures`)."""
    row = conn.execute(_COUNTS, {"start": start, "source": source}).one()
    return int(row.dead), int(row.dead) + int(row.delivered), int(row.failing)


def dead_deliveries(conn: Connection, *, limit: int = 50, source: str | None = None) -> list:
    """Dead deliveries (of ``source``'s alerts; None: every source's), the latest first, with their notification."""
    return list(conn.execute(
        text(
            """
            SELECT d.event_id, d.channel, d.tries, d.attempts, d.dead_at, d.http_status, d.last_error,
                   e.rule, e.segment_key, e.kind, e.occurred_at, e.delivery_id
            FROM judgeflow.alert_deliveries d JOIN judgeflow.alert_events e ON e.id = d.event_id
            WHERE d.status = 'dead' AND (CAST(:source AS text) IS NULL OR e.source = :source OR e.source IS NULL)
            ORDER BY d.dead_at DESC, d.event_id DESC, d.channel
            LIMIT :limit
            """
        ),
        {"limit": limit, "source": source},
    ))


def dead_event_id(delivery_id: str, channel: str) -> UUID:
    """The id of the Prefect event reporting one dead delivery: the same each time it is reported."""
    return uuid5(_DEAD_EVENT_NAMESPACE, f"{delivery_id}:{channel}")


def fired_delivery_died(conn: Connection, *, rule: str, segment_key: str, channel: str, before_event_id: int):
    """The latest "fired" of (``rule``, ``segment_key``) before notification
    ``before_event_id`` if its delivery on ``channel`` is dead, else None."""
    row = conn.execute(
        text(
            """
            SELECT e.id, e.occurred_at, d.status, d.last_error
            FROM judgeflow.alert_events e JOIN judgeflow.alert_deliveries d ON d.event_id = e.id
            WHERE e.rule = :rule AND e.segment_key = :segment AND e.kind = 'fired' AND e.id < :before
              AND d.channel = :channel
            ORDER BY e.id DESC LIMIT 1
            """
        ),
        {"rule": rule, "segment": segment_key, "before": before_event_id, "channel": channel},
    ).first()
    return row if row is not None and row.status == "dead" else None


@dataclass(frozen=True)
class DeadSummary:
    count: int
    latest_at: datetime | None
    channels: tuple[str, ...]

    def line(self) -> str | None:
        """One line for `judgeflow alerts` and `judgeflow status`; None when nothing is dead."""
        if not self.count:
            return None
        what = "alert delivery is" if self.count == 1 else "alert deliveries are"
        latest = self.latest_at.astimezone(timezone.utc)
        return (f"{self.count} {what} dead ({', '.join(self.channels)}; the latest at {latest:%Y-%m-%d %H:%M} UTC): "
                "their receivers never got them, and the dead_delivery_rate alert may have gone to the same "
                "channel; `judgeflow alerts` lists them")

    def as_json(self) -> dict:
        return {"count": self.count, "latest_at": None if self.latest_at is None else self.latest_at.isoformat(),
                "channels": list(self.channels)}


def dead_summary(conn: Connection, source: str | None) -> DeadSummary:
    """``source``'s dead deliveries."""
    row = conn.execute(text(
        "SELECT count(*), max(dead_at), array_agg(DISTINCT channel ORDER BY channel) "
        f"FROM judgeflow.alert_deliveries d WHERE status = 'dead' AND {_OWN}"
    ), {"source": source}).one()
    return DeadSummary(int(row[0]), row[1], tuple(c for c in (row[2] or []) if c))
