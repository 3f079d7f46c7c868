"""eval_results.segment: the segment values of each result, and a covering index

Revision ID: 0007
Revises: 0003
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0003"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # The JUDGEFLOW_ALERT_SEGMENT_BY values of the trace's metadata, copied when
    # it is scored: per-segment alert counts never read the customer's table.
    op.add_column(
        "eval_results", sa.Column("segment", JSONB, nullable=False, server_default="{}"), schema=S
    )
    # The window queries (overall and per segment) read only these columns: with
    # them in the index they are index-only range scans (bench: 1M results).
    op.drop_index("eval_results_metric_created_idx", table_name="eval_results", schema=S)
    op.create_index(
        "eval_results_metric_created_idx",
        "eval_results",
        ["metric", "trace_created_at"],
        schema=S,
        postgresql_include=["status", "passed", "segment"],
    )


def downgrade() -> None:
    op.drop_index("eval_results_metric_created_idx", table_name="eval_results", schema=S)
    op.create_index("eval_results_metric_created_idx", "eval_results", ["metric", "trace_created_at"], schema=S)
    op.drop_column("eval_results", "segment", schema=S)
