"""alert notification outbox: per-channel delivery state, stored payloads, delivery ids

Revision ID: 0005
Revises: 0002 (02_alerts.py)
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0005"
down_revision = "0002"
branch_labels = None
depends_on = None

S = "judgeflow"
OLD_STATUSES = "('pending', 'delivered', 'partial', 'failed', 'skipped')"
NEW_STATUSES = "('pending', 'delivered', 'partial', 'failed', 'skipped', 'superseded')"


def upgrade() -> None:
    # the notification as it is sent, every time: receivers de-duplicate on delivery_id
    op.add_column(
        "alert_events",
        sa.Column("delivery_id", UUID(as_uuid=False), nullable=False, server_default=sa.text("gen_random_uuid()")),
        schema=S,
    )
    op.add_column("alert_events", sa.Column("payload", JSONB), schema=S)
    op.add_column(
        "alert_events",
        sa.Column("superseded_by", sa.BigInteger, sa.ForeignKey(f"{S}.alert_events.id", ondelete="SET NULL")),
        schema=S,
    )
    op.create_unique_constraint("alert_events_delivery_id_key", "alert_events", ["delivery_id"], schema=S)
    op.drop_constraint("alert_events_delivery_status_check", "alert_events", schema=S, type_="check")
    op.create_check_constraint(
        "alert_events_delivery_status_check", "alert_events", f"delivery_status IN {NEW_STATUSES}", schema=S
    )
    # the outbox: one row per notification and channel, retried until delivered or superseded
    op.create_table(
        "alert_deliveries",
        sa.Column(
            "event_id", sa.BigInteger, sa.ForeignKey(f"{S}.alert_events.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("channel", sa.Text, primary_key=True),
        sa.Column("status", sa.Text, nullable=False, server_default="pending"),
        sa.Column("tries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True)),
        sa.Column("delivered_at", sa.DateTime(timezone=True)),
        sa.Column("http_status", sa.Integer),
        sa.Column("last_error", sa.Text),
        sa.Column("detail", sa.Text),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'skipped', 'superseded')", name="alert_deliveries_status_check"
        ),
        schema=S,
    )
    op.create_index(
        "alert_deliveries_pending_idx", "alert_deliveries", ["event_id"], schema=S,
        postgresql_where=sa.text("status = 'pending'"),
    )


def downgrade() -> None:
    op.drop_index("alert_deliveries_pending_idx", table_name="alert_deliveries", schema=S)
    op.drop_table("alert_deliveries", schema=S)
    op.execute(f"UPDATE {S}.alert_events SET delivery_status = 'failed' WHERE delivery_status = 'superseded'")
    op.drop_constraint("alert_events_delivery_status_check", "alert_events", schema=S, type_="check")
    op.create_check_constraint(
        "alert_events_delivery_status_check", "alert_events", f"delivery_status IN {OLD_STATUSES}", schema=S
    )
    op.drop_constraint("alert_events_delivery_id_key", "alert_events", schema=S, type_="unique")
    op.drop_column("alert_events", "superseded_by", schema=S)
    op.drop_column("alert_events", "payload", schema=S)
    op.drop_column("alert_events", "delivery_id", schema=S)
