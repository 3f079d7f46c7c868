"""eval_results.content_hash: identical content is judged once (issue 15)

Revision ID: 0006
Revises: 0007 (06_segments.py)
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0007"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # NULL for rows written before (they are never reused) and for failed rows
    op.add_column("eval_results", sa.Column("content_hash", sa.Text), schema=S)
    # only done rows are reused: a partial index stays small and is what the look-up probes
    op.create_index(
        "eval_results_content_hash_idx", "eval_results", ["content_hash"], schema=S,
        postgresql_where=sa.text("content_hash IS NOT NULL AND status IN ('scored', 'skipped')"),
    )


def downgrade() -> None:
    op.drop_index("eval_results_content_hash_idx", table_name="eval_results", schema=S)
    op.drop_column("eval_results", "content_hash", schema=S)
