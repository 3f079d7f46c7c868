"""robust results: bigint token counts, failed_runs

Revision ID: 0003
Revises: 0004 (04_claim_liveness.py)
Create Date: 2026-11-23

Token counts are sums a judge reports; a megabyte trace re-asked a few times,
or a provider reporting nonsense, must not overflow a 32-bit column and lose
the row. ``failed_runs`` counts the runs in which a pair ended 'failed': past
JUDGEFLOW_MAX_RUNS_PER_PAIR the nightly run stops paying for it.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0004"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    op.alter_column("eval_results", "prompt_tokens", type_=sa.BigInteger, schema=S)
    op.alter_column("eval_results", "completion_tokens", type_=sa.BigInteger, schema=S)
    op.add_column(
        "eval_results", sa.Column("failed_runs", sa.Integer, nullable=False, server_default="0"), schema=S
    )
    # a pair stored as failed before this column existed failed in at least one run
    op.execute(f"UPDATE {S}.eval_results SET failed_runs = 1 WHERE status = 'failed'")


def downgrade() -> None:
    op.drop_column("eval_results", "failed_runs", schema=S)
    op.alter_column("eval_results", "completion_tokens", type_=sa.Integer, schema=S)
    op.alter_column("eval_results", "prompt_tokens", type_=sa.Integer, schema=S)
