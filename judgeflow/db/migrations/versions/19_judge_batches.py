"""judge calls sent through the provider's batch API: each batch a run submitted and the lines it
carries, recorded before the run waits on it, so a later run collects them instead of paying twice

Revision ID: 0019
Revises: 0018 (18_cached_tokens.py)
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    op.create_table(
        "judge_batches",
        sa.Column("batch_id", sa.Text, nullable=False),
        sa.Column("provider", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("round", sa.Integer, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("lines", sa.Integer, nullable=False),
        sa.Column("completed_lines", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failed_lines", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("batch_id", name="judge_batches_pkey"),
        schema=S,
    )
    op.create_table(
        "judge_batch_lines",
        sa.Column("batch_id", sa.Text, nullable=False),
        sa.Column("custom_id", sa.Text, nullable=False),
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("step", sa.Text, nullable=False),
        # when a run handed the line's answer to its pair: the batch no longer holds that pair
        sa.Column("collected_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("batch_id", "custom_id", name="judge_batch_lines_pkey"),
        sa.ForeignKeyConstraint(["batch_id"], [f"{S}.judge_batches.batch_id"], ondelete="CASCADE",
                                name="judge_batch_lines_batch_fkey"),
        schema=S,
    )
    # a run asks by the line (adopting a batch out) and by the pair (claims skip a pair whose batch is alive)
    op.create_index("judge_batch_lines_custom_id", "judge_batch_lines", ["custom_id"], schema=S)
    op.create_index("judge_batch_lines_pair", "judge_batch_lines", ["trace_id", "metric"], schema=S)


def downgrade() -> None:
    op.drop_table("judge_batch_lines", schema=S)
    op.drop_table("judge_batches", schema=S)
