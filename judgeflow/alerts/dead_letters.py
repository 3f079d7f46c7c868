"""Dead alert deliveries: given up on, and the rule that pages about them.

A delivery is *dead* when its channel answered a permanent 4xx (anything but
408, 425 and 429: retrying the same request cannot help), or after
``JUDGEFLOW_ALERT_DEAD_AFTER`` evaluations that tried it and failed
(:func:`judgeflow.alerts.outbox.deliver_pending`). It is no longer retried and
no longer holds back the later notifications of its (rule, segment, channel)
queue; ``judgeflow alerts`` lists it with its last error.

The ``dead_delivery_rate`` rule (kind ``dead_deliveries``) makes that visible
where every other condition is: it is the share of the deliveries settled in
the window (delivered or dead, by when they settled) that are dead, with a
maximum of 0 by default, so one dead delivery fires it and it resolves once no
delivery has died within the window.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, text

_COUNTS = text(
    """
    SELECT
        (SELECT count(*) FROM judgeflow.alert_deliveries WHERE status = 'dead' AND dead_at >= :start) AS dead,
        (SELECT count(*) FROM judgeflow.alert_deliveries
          WHERE status = 'delivered' AND delivered_at >= :start) AS delivered,
        (SELECT count(*) FROM judgeflow.alert_deliveries WHERE status = 'pending' AND tries > 0) AS failing
    """
)


def dead_delivery_counts(conn: Connection, *, start: datetime) -> tuple[int, int, int]:
    """(dead, settled, failing): deliveries that died in the window, those
    settled in it (delivered or dead), and those still being retried; the
    rule's rate is dead / settled (:func:`judgeflow.alerts.evaluation.segment_figures`)."""
    row = conn.execute(_COUNTS, {"start": start}).one()
    return int(row.dead), int(row.dead) + int(row.delivered), int(row.failing)


def dead_deliveries(conn: Connection, *, limit: int = 50) -> list:
    """Dead deliveries, the latest first, with their notification."""
    return list(conn.execute(
        text(
            """
            SELECT d.event_id, d.channel, d.tries, d.attempts, d.dead_at, d.http_status, d.last_error,
                   e.rule, e.segment_key, e.kind, e.occurred_at, e.delivery_id
            FROM judgeflow.alert_deliveries d JOIN judgeflow.alert_events e ON e.id = d.event_id
            WHERE d.status = 'dead'
            ORDER BY d.dead_at DESC, d.event_id DESC, d.channel
            LIMIT :limit
            """
        ),
        {"limit": limit},
    ))
