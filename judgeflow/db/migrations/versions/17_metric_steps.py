"""what a metric needed from the judge once before it could score (a G-Eval metric's evaluation steps
written from its criteria), kept so later runs score with the same

Revision ID: 0017
Revises: 0016 (16_result_rollup.py)
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # one row per (metric, what the value was made from): an edited criteria is another key, so
    # its steps are written once more, and the old ones stay for the results scored with them
    op.create_table(
        "metric_steps",
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("value", postgresql.JSONB, nullable=False),
        sa.Column("judge_model", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("metric", "key", name="metric_steps_pkey"),
        schema=S,
    )


def downgrade() -> None:
    op.drop_table("metric_steps", schema=S)
