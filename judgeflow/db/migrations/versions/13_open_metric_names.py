"""any registered metric's results: eval_results.metric is no longer limited to the two built-in names

Revision ID: 0013
Revises: 0012 (12_sample_weights.py)
Create Date: 2026-11-27
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # Which metrics exist is the registry's (judgeflow/metrics/registry.py), checked where a run
    # starts; a check here would need a migration for every metric a plugin adds.
    op.drop_constraint("eval_results_metric_check", "eval_results", schema=S, type_="check")


def downgrade() -> None:
    # fails while rows of other metrics are stored: delete them first
    op.create_check_constraint(
        "eval_results_metric_check", "eval_results", "metric IN ('toxicity', 'hallucination')", schema=S
    )
