"""Core table objects for the alert state tables (migrations 02_alerts.py, 03_alert_outbox.py).

``alerts`` holds the current state of each rule, one row per rule;
``alert_events`` holds one row per notification (fired, reminder, resolved)
with the figures and the payload sent, its delivery id and a summary of how
its delivery went; ``alert_deliveries`` is the outbox: one row per
notification and channel, retried until delivered or superseded.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

from judgeflow.db.schema import SCHEMA, metadata

ALERT_STATES = ("ok", "firing")
# what the last evaluation found; 'not_enough_data' and 'insufficient_data' (too
# few results of the judge epoch in force, migration 09_judge_epochs.py) never change the state
ALERT_OUTCOMES = ("ok", "firing", "not_enough_data", "insufficient_data")
NOTIFICATION_KINDS = ("fired", "reminder", "resolved")
DELIVERY_STATUSES = ("pending", "delivered", "partial", "failed", "skipped", "superseded")
CHANNEL_STATUSES = ("pending", "delivered", "skipped", "superseded")

def _segment_columns(*, key: bool = True) -> list[Column]:
    """The segment and the baseline evidence, on both alert tables (migration 06_segments.py)."""
    columns = [Column("segment", JSONB, nullable=False, server_default="{}")]
    if key:
        columns.append(Column("segment_key", Text, nullable=False, server_default=""))
    return columns + [
        Column("baseline_value", Float),
        Column("baseline_sample_size", Integer),
        Column("baseline_violations", Integer),
        Column("p_value", Float),
        # the rate's evidence (migration 15_sample_ledger.py): its 95% interval, the traffic the
        # judged results stand for and the effective sample size the rule read
        Column("ci_low", Float),
        Column("ci_high", Float),
        Column("traffic", Float),
        Column("effective_n", Float),
    ]


alert_events = Table(
    "alert_events",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("rule", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("value", Float),
    Column("threshold", Float),
    Column("window", Text),
    Column("sample_size", Integer, nullable=False, server_default="0"),
    Column("violations", Integer, nullable=False, server_default="0"),
    Column("failed_count", Integer, nullable=False, server_default="0"),
    Column("worst", JSONB, nullable=False, server_default="[]"),
    Column("flow_run_id", Text),
    Column("delivery_status", Text, nullable=False, server_default="pending"),
    Column("delivered_at", DateTime(timezone=True)),
    Column("delivery_error", Text),
    Column("delivery_attempts", Integer, nullable=False, server_default="0"),
    Column("deliveries", JSONB, nullable=False, server_default="{}"),
    Column("delivery_id", UUID(as_uuid=False), nullable=False, server_default=text("gen_random_uuid()"), unique=True),
    Column("payload", JSONB),
    Column("superseded_by", BigInteger, ForeignKey(f"{SCHEMA}.alert_events.id", ondelete="SET NULL")),
    Column("source", Text),  # the source whose alert it is (migration 11_result_sources.py)
    *_segment_columns(),
    CheckConstraint("kind IN ('fired', 'reminder', 'resolved')", name="alert_events_kind_check"),
    CheckConstraint("state IN ('ok', 'firing')", name="alert_events_state_check"),
    CheckConstraint(
        "delivery_status IN ('pending', 'delivered', 'partial', 'failed', 'skipped', 'superseded', 'dead')",
        name="alert_events_delivery_status_check",
    ),
    Index("alert_events_rule_occurred_idx", "rule", "occurred_at"),
    Index("alert_events_rule_segment_idx", "rule", "segment_key", "id"),
    schema=SCHEMA,
)

alerts = Table(
    "alerts",
    metadata,
    # one state per source (judgeflow/sources/identity.py; migration 11_result_sources.py): a source
    # never inherits another's; '' until the first command assigns it (judgeflow/db/result_sources.py)
    Column("source", Text, primary_key=True, server_default=""),
    Column("rule", Text, primary_key=True),
    # one row per (rule, segment); '' is the rule over all results (migration 06_segments.py)
    Column("segment_key", Text, primary_key=True, server_default=""),
    Column("state", Text, nullable=False, server_default="ok"),
    Column("last_outcome", Text),
    Column("value", Float),
    Column("threshold", Float),
    Column("window", Text),
    Column("sample_size", Integer, nullable=False, server_default="0"),
    Column("violations", Integer, nullable=False, server_default="0"),
    Column("failed_count", Integer, nullable=False, server_default="0"),
    Column("min_samples", Integer),
    Column("opened_at", DateTime(timezone=True)),
    Column("resolved_at", DateTime(timezone=True)),
    Column("last_notified_at", DateTime(timezone=True)),
    Column("last_evaluated_at", DateTime(timezone=True)),
    Column("last_event_id", BigInteger, ForeignKey(f"{SCHEMA}.alert_events.id", ondelete="SET NULL")),
    Column("delivery_status", Text),
    Column("delivered_at", DateTime(timezone=True)),
    Column("delivery_error", Text),
    Column("delivery_attempts", Integer, nullable=False, server_default="0"),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    *_segment_columns(key=False),
    # when the judge epoch the row was last evaluated in started (migration 09_judge_epochs.py)
    Column("epoch_started_at", DateTime(timezone=True)),
    CheckConstraint("state IN ('ok', 'firing')", name="alerts_state_check"),
    CheckConstraint(
        "last_outcome IS NULL OR last_outcome IN ('ok', 'firing', 'not_enough_data', 'insufficient_data')",
        name="alerts_last_outcome_check",
    ),
    schema=SCHEMA,
)

alert_deliveries = Table(
    "alert_deliveries",
    metadata,
    Column("event_id", BigInteger, ForeignKey(f"{SCHEMA}.alert_events.id", ondelete="CASCADE"), primary_key=True),
    Column("channel", Text, primary_key=True),  # prefect_event | webhook | slack
    Column("status", Text, nullable=False, server_default="pending"),
    Column("tries", Integer, nullable=False, server_default="0"),  # evaluations that tried it
    Column("attempts", Integer, nullable=False, server_default="0"),  # requests made, retries included
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("last_attempt_at", DateTime(timezone=True)),
    Column("delivered_at", DateTime(timezone=True)),
    Column("http_status", Integer),
    Column("last_error", Text),
    Column("detail", Text),
    # given up on: a permanent 4xx, or JUDGEFLOW_ALERT_DEAD_AFTER failed evaluations (migration 08_dead_deliveries.py)
    Column("dead_at", DateTime(timezone=True)),
    CheckConstraint(
        "status IN ('pending', 'delivered', 'skipped', 'superseded', 'dead')", name="alert_deliveries_status_check"
    ),
    Index("alert_deliveries_pending_idx", "event_id", postgresql_where=text("status = 'pending'")),
    Index("alert_deliveries_dead_idx", "dead_at", postgresql_where=text("status = 'dead'")),
    Index("alert_deliveries_delivered_idx", "delivered_at", postgresql_where=text("status = 'delivered'")),
    schema=SCHEMA,
)
