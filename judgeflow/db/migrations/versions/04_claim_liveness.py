"""claims.owner_key (run liveness) and superseded_results

Revision ID: 0004
Revises: 0005 (03_alert_outbox.py)
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0005"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # the key of the advisory lock the owning run holds while it lives; NULL
    # (claims taken before this revision, or by a caller without a run lock)
    # means the lease alone decides
    op.add_column("claims", sa.Column("owner_key", sa.BigInteger), schema=S)
    # a result computed by a run that no longer owned the pair's claim: kept
    # (the judge call was paid for) but never written over eval_results
    op.create_table(
        "superseded_results",
        sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("score", sa.Float),
        sa.Column("judge_calls", sa.Integer, nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Float),
        sa.Column("flow_run_id", sa.Text),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        schema=S,
    )
    op.create_index("superseded_results_pair_idx", "superseded_results", ["trace_id", "metric"], schema=S)


def downgrade() -> None:
    op.drop_table("superseded_results", schema=S)
    op.drop_column("claims", "owner_key", schema=S)
