"""results that survive messy logs: bigint token counts, failed runs per pair

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # runs in which the pair ended 'failed'; at JUDGEFLOW_MAX_RUNS_PER_PAIR it is given up
    # (no longer picked automatically) until `--retry-failed` or a backfill
    op.add_column(
        "eval_results", sa.Column("failed_runs", sa.Integer, nullable=False, server_default="0"), schema=S
    )


def downgrade() -> None:
    op.drop_column("eval_results", "failed_runs", schema=S)
