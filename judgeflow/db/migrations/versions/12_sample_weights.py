"""the sample budget's decisions: per trace, its night, stratum, inclusion probability and whether it was selected

Revision ID: 0012
Revises: 0011 (11_result_sources.py)
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # One row per trace a sample budget decided on (judgeflow/sampling/): a
    # selected trace's results are weighted by 1 / inclusion_prob; a trace not
    # selected is neither pending nor failed for nightly runs, and a backfill can
    # still judge it. Traces never planned (no budget, or everything fit) have no
    # row and weigh 1.
    op.create_table(
        "sample_decisions",
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("night", sa.Date, nullable=False),
        sa.Column("stratum", sa.Text, nullable=False),
        sa.Column("inclusion_prob", sa.Float, nullable=False),
        sa.Column("selected", sa.Boolean, nullable=False),
        # the estimated cost of judging it (every metric): what a night's budget has committed
        sa.Column("est_cost_usd", sa.Float, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True)),  # the trace's
        sa.Column("planned_by", sa.Text),  # the flow run that decided
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("inclusion_prob > 0 AND inclusion_prob <= 1", name="sample_decisions_prob_check"),
        sa.PrimaryKeyConstraint("trace_id", name="sample_decisions_pkey"),
        schema=S,
    )
    op.create_index("sample_decisions_night_idx", "sample_decisions", ["night", "stratum"], schema=S)
    # rates over a window look up whether any trace of it was sampled
    op.create_index("sample_decisions_created_idx", "sample_decisions", ["created_at"], schema=S)
    # `judgeflow status` counts the traces not sampled and still without a result
    op.create_index(
        "sample_decisions_not_selected_idx", "sample_decisions", ["trace_id"], schema=S,
        postgresql_where=sa.text("NOT selected"),
    )


def downgrade() -> None:
    op.drop_table("sample_decisions", schema=S)
