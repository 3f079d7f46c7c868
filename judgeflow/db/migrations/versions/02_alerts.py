"""alerts and alert_events

Revision ID: 0002
Revises: 0001 (01_results_and_claims.py)
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    _create_alert_events()
    _create_alerts()


def _create_alert_events() -> None:
    # one row per notification sent (or attempted): the alert history
    op.create_table(
        "alert_events",
        sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("value", sa.Float),
        sa.Column("threshold", sa.Float),
        sa.Column("window", sa.Text),
        sa.Column("sample_size", sa.Integer, nullable=False, server_default="0"),
        sa.Column("violations", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failed_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("worst", JSONB, nullable=False, server_default="[]"),
        sa.Column("flow_run_id", sa.Text),
        sa.Column("delivery_status", sa.Text, nullable=False, server_default="pending"),
        sa.Column("delivered_at", sa.DateTime(timezone=True)),
        sa.Column("delivery_error", sa.Text),
        sa.Column("delivery_attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("deliveries", JSONB, nullable=False, server_default="{}"),
        sa.CheckConstraint("kind IN ('fired', 'reminder', 'resolved')", name="alert_events_kind_check"),
        sa.CheckConstraint("state IN ('ok', 'firing')", name="alert_events_state_check"),
        sa.CheckConstraint(
            "delivery_status IN ('pending', 'delivered', 'partial', 'failed', 'skipped')",
            name="alert_events_delivery_status_check",
        ),
        schema=S,
    )
    op.create_index("alert_events_rule_occurred_idx", "alert_events", ["rule", "occurred_at"], schema=S)


def _create_alerts() -> None:
    # the current state of each rule; its row is the lock evaluators serialise on
    op.create_table(
        "alerts",
        sa.Column("rule", sa.Text, primary_key=True),
        sa.Column("state", sa.Text, nullable=False, server_default="ok"),
        sa.Column("last_outcome", sa.Text),
        sa.Column("value", sa.Float),
        sa.Column("threshold", sa.Float),
        sa.Column("window", sa.Text),
        sa.Column("sample_size", sa.Integer, nullable=False, server_default="0"),
        sa.Column("violations", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failed_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("min_samples", sa.Integer),
        sa.Column("opened_at", sa.DateTime(timezone=True)),
        sa.Column("resolved_at", sa.DateTime(timezone=True)),
        sa.Column("last_notified_at", sa.DateTime(timezone=True)),
        sa.Column("last_evaluated_at", sa.DateTime(timezone=True)),
        sa.Column(
            "last_event_id", sa.BigInteger, sa.ForeignKey(f"{S}.alert_events.id", ondelete="SET NULL")
        ),
        sa.Column("delivery_status", sa.Text),
        sa.Column("delivered_at", sa.DateTime(timezone=True)),
        sa.Column("delivery_error", sa.Text),
        sa.Column("delivery_attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("state IN ('ok', 'firing')", name="alerts_state_check"),
        sa.CheckConstraint(
            "last_outcome IS NULL OR last_outcome IN ('ok', 'firing', 'not_enough_data')",
            name="alerts_last_outcome_check",
        ),
        schema=S,
    )


def downgrade() -> None:
    op.drop_table("alerts", schema=S)
    op.drop_index("alert_events_rule_occurred_idx", table_name="alert_events", schema=S)
    op.drop_table("alert_events", schema=S)
