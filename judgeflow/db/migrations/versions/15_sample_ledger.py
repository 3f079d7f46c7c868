"""the sample budget's night: its ledger of billed spend per run, each stratum's
inclusion probability, the phase of each decision, and the evidence of a rate on
the alert tables

Revision ID: 0015
Revises: 0014 (14_epochs_per_source.py)
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

S = "judgeflow"
EVIDENCE = ("ci_low", "ci_high", "traffic", "effective_n")


def upgrade() -> None:
    # What each run of a night billed under the sample budget: the night's budget
    # is what is left of it after every earlier run of the night, not a fresh one per run.
    op.create_table(
        "sample_ledger",
        sa.Column("night", sa.Date, nullable=False),
        sa.Column("flow_run_id", sa.Text, nullable=False),
        sa.Column("budget_usd", sa.Float, nullable=False),
        sa.Column("spent_usd", sa.Float, nullable=False, server_default="0"),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("night", "flow_run_id", name="sample_ledger_pkey"),
        schema=S,
    )
    # A stratum's inclusion probability for the night: traces of it that arrive
    # after the plan are selected against the same probability.
    op.create_table(
        "sample_strata",
        sa.Column("night", sa.Date, nullable=False),
        sa.Column("stratum", sa.Text, nullable=False),
        sa.Column("inclusion_prob", sa.Float, nullable=False),
        sa.Column("cost_per_trace", sa.Float, nullable=False, server_default="0"),
        sa.Column("planned_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("inclusion_prob >= 0 AND inclusion_prob <= 1", name="sample_strata_prob_check"),
        sa.PrimaryKeyConstraint("night", "stratum", name="sample_strata_pkey"),
        schema=S,
    )
    # 'sample': selected by hash against the stratum's probability; 'certainty':
    # judged in full by a backfill, weighing 1, apart from the sample's phase.
    op.add_column("sample_decisions", sa.Column("phase", sa.Text, nullable=False, server_default="sample"),
                  schema=S)
    op.create_check_constraint("sample_decisions_phase_check", "sample_decisions",
                               "phase IN ('sample', 'certainty')", schema=S)
    for table in ("alerts", "alert_events"):
        for column in EVIDENCE:
            op.add_column(table, sa.Column(column, sa.Float), schema=S)


def downgrade() -> None:
    for table in ("alerts", "alert_events"):
        for column in EVIDENCE:
            op.drop_column(table, column, schema=S)
    op.drop_constraint("sample_decisions_phase_check", "sample_decisions", schema=S)
    op.drop_column("sample_decisions", "phase", schema=S)
    op.drop_table("sample_strata", schema=S)
    op.drop_table("sample_ledger", schema=S)
