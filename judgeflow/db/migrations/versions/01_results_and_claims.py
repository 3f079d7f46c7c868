"""eval_results and claims

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    op.create_table(
        "eval_results",
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("metric_version", sa.Text),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("score", sa.Float),
        sa.Column("passed", sa.Boolean),
        sa.Column("threshold", sa.Float),
        sa.Column("reason", sa.Text),
        sa.Column("details", JSONB, nullable=False, server_default="{}"),
        sa.Column("judge_model", sa.Text),
        sa.Column("prompt_tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("completion_tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Float),
        sa.Column("latency_ms", sa.Float),
        sa.Column("judge_calls", sa.Integer, nullable=False, server_default="0"),
        sa.Column("error", sa.Text),
        sa.Column("error_kind", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("flow_run_id", sa.Text),
        sa.Column("trace_created_at", sa.DateTime(timezone=True)),
        sa.Column("scored_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("trace_id", "metric", name="eval_results_pkey"),
        sa.CheckConstraint("metric IN ('toxicity', 'hallucination')", name="eval_results_metric_check"),
        sa.CheckConstraint("status IN ('scored', 'skipped', 'failed')", name="eval_results_status_check"),
        sa.CheckConstraint("score IS NULL OR (score >= 0 AND score <= 1)", name="eval_results_score_check"),
        schema=S,
    )
    # rolling-window alert queries read results by metric and trace time
    op.create_index(
        "eval_results_metric_created_idx", "eval_results", ["metric", "trace_created_at"], schema=S
    )
    op.create_index(
        "eval_results_failed_idx",
        "eval_results",
        ["metric"],
        schema=S,
        postgresql_where=sa.text("status = 'failed'"),
    )
    op.create_table(
        "claims",
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "metric", name="claims_pkey"),
        schema=S,
    )
    op.create_index("claims_owner_idx", "claims", ["owner"], schema=S)


def downgrade() -> None:
    op.drop_table("claims", schema=S)
    op.drop_table("eval_results", schema=S)
