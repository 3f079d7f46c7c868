"""the prompt tokens of each result the provider served from its prompt cache

Revision ID: 0018
Revises: 0017 (17_metric_steps.py)
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # rows written before it counted none: 0, as a provider without a prompt cache reports
    op.add_column(
        "eval_results",
        sa.Column("cached_tokens", sa.BigInteger, nullable=False, server_default="0"),
        schema=S,
    )


def downgrade() -> None:
    op.drop_column("eval_results", "cached_tokens", schema=S)
