"""conversations (issue 57): the sessions judgeflow has seen in each source and their turns, kept
in step with new traces so finding the quiet sessions reads new turns, never the history

Revision ID: 0024
Revises: 0023 (23_labels.py)
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # one row per (source, session key); session_id is the key's result id (judgeflow/sources/session_id.py):
    # what eval_results and claims hold for a session, as trace_id does for a trace
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("source", sa.Text, nullable=False),
        # the metadata value as the source holds it (may be long: never indexed, never a key)
        sa.Column("session_key", sa.Text, nullable=False),
        sa.Column("first_turn_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_turn_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("turns", sa.Integer, nullable=False),
        # the turns and the last turn the latest judging saw; NULL before the first
        sa.Column("judged_turns", sa.Integer),
        sa.Column("judged_last_turn_at", sa.DateTime(timezone=True)),
        sa.Column("judged_at", sa.DateTime(timezone=True)),
        schema=S,
    )
    # what a run looks for: sessions with turns no judging saw, quiet or not yet (a partial index, so
    # the search reads the sessions that changed, not every session ever seen)
    op.create_index("sessions_due_idx", "sessions", ["source", "last_turn_at"], schema=S,
                    postgresql_where=sa.text("judged_turns IS NULL OR judged_turns <> turns"))
    op.create_index("sessions_source_key_idx", "sessions", ["source", sa.text("md5(session_key)")], schema=S)
    # one row per turn: which session a trace belongs to (a trace in no session has none)
    op.create_table(
        "session_turns",
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("trace_id", sa.Text, nullable=False),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("source", "trace_id", name="session_turns_pkey"),
        schema=S,
    )
    op.create_index("session_turns_session_idx", "session_turns", ["session_id", "created_at", "trace_id"], schema=S)
    # per source: the source's traces up to this time have their turns recorded above
    op.create_table(
        "session_scans",
        sa.Column("source", sa.Text, primary_key=True),
        sa.Column("scanned_to", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        schema=S,
    )


def downgrade() -> None:
    op.drop_table("session_scans", schema=S)
    op.drop_index("session_turns_session_idx", table_name="session_turns", schema=S)
    op.drop_table("session_turns", schema=S)
    op.drop_index("sessions_source_key_idx", table_name="sessions", schema=S)
    op.drop_index("sessions_due_idx", table_name="sessions", schema=S)
    op.drop_table("sessions", schema=S)
