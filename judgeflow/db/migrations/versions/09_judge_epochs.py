"""judge epochs and shadow results: rules count only the judge in force now (issue 31)

Revision ID: 0010
Revises: 0009 (08_dead_deliveries.py)
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

S = "judgeflow"
OLD_OUTCOMES = "('ok', 'firing', 'not_enough_data')"
NEW_OUTCOMES = "('ok', 'firing', 'not_enough_data', 'insufficient_data')"


def upgrade() -> None:
    _create_judge_epochs()
    _create_shadow_results()
    _alerts_remember_the_epoch()


def _create_judge_epochs() -> None:
    # One row per (metric, metric_version, judge_model) from the moment a scoring
    # run started using it: the latest row of a metric is the epoch in force.
    op.create_table(
        "judge_epochs",
        sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("metric_version", sa.Text, nullable=False),
        sa.Column("judge_model", sa.Text, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("flow_run_id", sa.Text),
        schema=S,
    )
    op.create_index("judge_epochs_metric_started_idx", "judge_epochs", ["metric", "started_at", "id"], schema=S)


def _create_shadow_results() -> None:
    # What a candidate judge said about a sample of traces, beside what the
    # current judge had said (copied when the shadow run scored it): the report
    # is computed from this table alone; eval_results is never written.
    op.create_table(
        "shadow_results",
        sa.Column("shadow_run_id", sa.Text, nullable=False),
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("segment", JSONB, nullable=False, server_default="{}"),
        sa.Column("stratum", sa.Text, nullable=False, server_default=""),
        sa.Column("trace_created_at", sa.DateTime(timezone=True)),
        sa.Column("metric_version", sa.Text),
        sa.Column("judge_model", sa.Text),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("score", sa.Float),
        sa.Column("passed", sa.Boolean),
        sa.Column("threshold", sa.Float),
        sa.Column("reason", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("judge_calls", sa.Integer, nullable=False, server_default="0"),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Float),
        sa.Column("latency_ms", sa.Float),
        sa.Column("current_metric_version", sa.Text),
        sa.Column("current_judge_model", sa.Text),
        sa.Column("current_status", sa.Text),
        sa.Column("current_score", sa.Float),
        sa.Column("current_passed", sa.Boolean),
        sa.Column("current_reason", sa.Text),
        sa.Column("current_judge_calls", sa.Integer, nullable=False, server_default="0"),
        sa.Column("current_prompt_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("current_completion_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("current_cost_usd", sa.Float),
        sa.Column("scored_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("shadow_run_id", "trace_id", "metric", name="shadow_results_pkey"),
        sa.CheckConstraint("status IN ('scored', 'skipped', 'failed')", name="shadow_results_status_check"),
        schema=S,
    )


def _alerts_remember_the_epoch() -> None:
    # the epoch a (rule, segment) was last evaluated in: `judgeflow alerts` says
    # "judge changed at ..." from it
    op.add_column("alerts", sa.Column("epoch_started_at", sa.DateTime(timezone=True)), schema=S)
    op.drop_constraint("alerts_last_outcome_check", "alerts", schema=S)
    op.create_check_constraint(
        "alerts_last_outcome_check", "alerts", f"last_outcome IS NULL OR last_outcome IN {NEW_OUTCOMES}", schema=S
    )

    # The window queries also decide each result's epoch (metric_version,
    # scored_at): with those in the index they stay index-only range scans.
    op.drop_index("eval_results_metric_created_idx", table_name="eval_results", schema=S)
    op.create_index(
        "eval_results_metric_created_idx",
        "eval_results",
        ["metric", "trace_created_at"],
        schema=S,
        postgresql_include=["status", "passed", "segment", "metric_version", "scored_at"],
    )


def downgrade() -> None:
    op.drop_index("eval_results_metric_created_idx", table_name="eval_results", schema=S)
    op.create_index(
        "eval_results_metric_created_idx",
        "eval_results",
        ["metric", "trace_created_at"],
        schema=S,
        postgresql_include=["status", "passed", "segment"],
    )
    op.execute(f"UPDATE {S}.alerts SET last_outcome = 'not_enough_data' WHERE last_outcome = 'insufficient_data'")
    op.drop_constraint("alerts_last_outcome_check", "alerts", schema=S)
    op.create_check_constraint(
        "alerts_last_outcome_check", "alerts", f"last_outcome IS NULL OR last_outcome IN {OLD_OUTCOMES}", schema=S
    )
    op.drop_column("alerts", "epoch_started_at", schema=S)
    op.drop_table("shadow_results", schema=S)
    op.drop_table("judge_epochs", schema=S)
