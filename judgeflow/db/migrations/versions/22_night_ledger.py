"""a sharded night's shared ledger: the spend budget and trace limit its child flow runs hold
together, keyed by the parent's flow run id (judgeflow/db/night_ledger.py)

Revision ID: 0022
Revises: 0021 (21_online_answers.py)
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # one row per sharded night (its parent flow run): the children reserve and charge here, one pair at a time
    op.create_table(
        "night_ledger",
        sa.Column("night_run_id", sa.Text, primary_key=True),
        sa.Column("budget_usd", sa.Float),
        sa.Column("trace_limit", sa.Integer),
        # under a sample budget: the night the parent planned, its budget, and the oldest trace it selected
        sa.Column("sample_night", sa.Date),
        sa.Column("sample_budget_usd", sa.Float),
        sa.Column("reads_from", sa.DateTime(timezone=True)),
        sa.Column("spent_usd", sa.Float, nullable=False, server_default="0"),
        sa.Column("in_flight_usd", sa.Float, nullable=False, server_default="0"),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        schema=S,
    )
    # the traces a night under --limit has taken, whichever child claimed them
    op.create_table(
        "night_traces",
        sa.Column("night_run_id", sa.Text, nullable=False),
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("night_run_id", "trace_id", name="night_traces_pkey"),
        schema=S,
    )


def downgrade() -> None:
    op.drop_table("night_traces", schema=S)
    op.drop_table("night_ledger", schema=S)
