"""sampling with the session as the unit (issue 57, item 5): a session's sample decision

A sampled night decides on its quiet sessions in ``sample_decisions`` as on its traces, the row
keyed by the session's result id ('s:...'), so a judged session's results weigh 1 / its inclusion
probability through the same join as a trace's. Their phase is 'session': the trace strata's
queries (settling, raising, top-ups, backfill reweighing) read the phases 'sample' and 'certainty'
and never mix sessions into a trace stratum (judgeflow/sampling/sessions.py).

Revision ID: 0026
Revises: 0025 (25_session_scores.py)
Create Date: 2026-11-29
"""

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    op.drop_constraint("sample_decisions_phase_check", "sample_decisions", schema=S)
    op.create_check_constraint("sample_decisions_phase_check", "sample_decisions",
                               "phase IN ('sample', 'certainty', 'session')", schema=S)


def downgrade() -> None:
    op.execute("DELETE FROM judgeflow.sample_decisions WHERE phase = 'session'")
    op.drop_constraint("sample_decisions_phase_check", "sample_decisions", schema=S)
    op.create_check_constraint("sample_decisions_phase_check", "sample_decisions",
                               "phase IN ('sample', 'certainty')", schema=S)
