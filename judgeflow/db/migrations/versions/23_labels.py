"""people's labels and the probability samples drawn for them (issue 58: rates corrected for the
judge's error; judgeflow/calibration/ and `judgeflow labels`)

Revision ID: 0023
Revises: 0022 (22_night_ledger.py)
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # one row per `judgeflow labels sample`: what was drawn from, under which judge epoch
    op.create_table(
        "label_draws",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        # the judge epoch in force for (source, metric) when drawn (judgeflow.judge_epochs.id); labels
        # count only for it
        sa.Column("epoch_id", sa.BigInteger),
        sa.Column("since", sa.DateTime(timezone=True)),
        sa.Column("segment", JSONB, nullable=False, server_default="{}"),
        sa.Column("requested", sa.Integer, nullable=False),
        sa.Column("seed", sa.BigInteger, nullable=False),
        # per stratum (the judge's verdict): population size and how many were drawn
        sa.Column("strata", JSONB, nullable=False, server_default="{}"),
        sa.Column("drawn_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        schema=S,
    )
    # the units a draw picked, each with its inclusion probability (a result's key: trace or session id)
    op.create_table(
        "label_draw_items",
        sa.Column("draw_id", sa.BigInteger, sa.ForeignKey(f"{S}.label_draws.id", ondelete="CASCADE"), nullable=False),
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("stratum", sa.Text, nullable=False),
        # the judge's verdict when drawn: True = the judge said it fails the metric
        sa.Column("judged_fail", sa.Boolean, nullable=False),
        sa.Column("inclusion_prob", sa.Float, nullable=False),
        # the result's own weight on a sampled night (1/its sampling probability; 1 on a full night)
        sa.Column("result_weight", sa.Float, nullable=False, server_default="1"),
        sa.PrimaryKeyConstraint("draw_id", "trace_id", name="label_draw_items_pkey"),
        schema=S,
    )
    op.create_index("label_draw_items_trace_idx", "label_draw_items", ["trace_id"], schema=S)
    # one label per (unit, metric, labeller); the latest import wins. draw_id NULL = hand-picked (not a
    # probability sample: stored, never used for correction)
    op.create_table(
        "labels",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        # True = a person says it fails the metric (the same sense as calibration's labelled sets)
        sa.Column("label", sa.Boolean, nullable=False),
        sa.Column("labeller", sa.Text, nullable=False, server_default=""),
        sa.Column("draw_id", sa.BigInteger, sa.ForeignKey(f"{S}.label_draws.id", ondelete="SET NULL")),
        sa.Column("imported_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.UniqueConstraint("trace_id", "metric", "labeller", name="labels_unit_metric_labeller_key"),
        schema=S,
    )
    op.create_index("labels_metric_draw_idx", "labels", ["metric", "draw_id"], schema=S)


def downgrade() -> None:
    op.drop_table("labels", schema=S)
    op.drop_table("label_draw_items", schema=S)
    op.drop_table("label_draws", schema=S)
