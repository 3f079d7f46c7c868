"""a batch line the provider failed and the run asked again online: that answer on record, so a run
stopped before it stored the line's pair does not pay for it again (judgeflow/db/judge_batches.py)

Revision ID: 0021
Revises: 0020 (20_result_listing.py)
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    op.create_table(
        "judge_online_answers",
        # the failed line's custom_id: the same request asked again finds its answer here
        sa.Column("custom_id", sa.Text, nullable=False),
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("step", sa.Text, nullable=False),
        # the reply as the judge handed it to the pair, with what it cost
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("prompt_tokens", sa.Integer),
        sa.Column("completion_tokens", sa.Integer),
        sa.Column("cached_tokens", sa.Integer),
        sa.Column("cost_usd", sa.Float),
        sa.Column("calls", sa.Integer, nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("custom_id", name="judge_online_answers_pkey"),
        schema=S,
    )


def downgrade() -> None:
    op.drop_table("judge_online_answers", schema=S)
