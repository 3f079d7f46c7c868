"""dead alert deliveries: a delivery given up on (a permanent 4xx, or JUDGEFLOW_ALERT_DEAD_AFTER failed evaluations)

Revision ID: 0009
Revises: 0006 (07_content_hash.py)
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0006"
branch_labels = None
depends_on = None

S = "judgeflow"
OLD_EVENT = "('pending', 'delivered', 'partial', 'failed', 'skipped', 'superseded')"
NEW_EVENT = "('pending', 'delivered', 'partial', 'failed', 'skipped', 'superseded', 'dead')"
OLD_DELIVERY = "('pending', 'delivered', 'skipped', 'superseded')"
NEW_DELIVERY = "('pending', 'delivered', 'skipped', 'superseded', 'dead')"


def _checks(event: str, delivery: str) -> None:
    op.drop_constraint("alert_events_delivery_status_check", "alert_events", schema=S, type_="check")
    op.create_check_constraint(
        "alert_events_delivery_status_check", "alert_events", f"delivery_status IN {event}", schema=S
    )
    op.drop_constraint("alert_deliveries_status_check", "alert_deliveries", schema=S, type_="check")
    op.create_check_constraint(
        "alert_deliveries_status_check", "alert_deliveries", f"status IN {delivery}", schema=S
    )


def upgrade() -> None:
    op.add_column("alert_deliveries", sa.Column("dead_at", sa.DateTime(timezone=True)), schema=S)
    _checks(NEW_EVENT, NEW_DELIVERY)
    # the dead-delivery rule counts what ended in its window: both by time
    op.create_index(
        "alert_deliveries_dead_idx", "alert_deliveries", ["dead_at"], schema=S,
        postgresql_where=sa.text("status = 'dead'"),
    )
    op.create_index(
        "alert_deliveries_delivered_idx", "alert_deliveries", ["delivered_at"], schema=S,
        postgresql_where=sa.text("status = 'delivered'"),
    )


def downgrade() -> None:
    op.drop_index("alert_deliveries_delivered_idx", table_name="alert_deliveries", schema=S)
    op.drop_index("alert_deliveries_dead_idx", table_name="alert_deliveries", schema=S)
    # a dead delivery goes back to the queue it left: pending, retried by the next evaluation
    op.execute(f"UPDATE {S}.alert_deliveries SET status = 'pending' WHERE status = 'dead'")
    op.execute(f"UPDATE {S}.alert_events SET delivery_status = 'failed' WHERE delivery_status = 'dead'")
    _checks(OLD_EVENT, OLD_DELIVERY)
    op.drop_column("alert_deliveries", "dead_at", schema=S)
