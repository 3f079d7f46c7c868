"""conversations (issue 57): each score a session metric gave a session, kept as its history

eval_results keeps a session's latest row per metric (what rates, alerts and reports count); every
row written for a session (trace_id 's:...', judgeflow/sources/session_id.py) is also appended
here by a trigger, in the same transaction, so the history is never behind the latest score and
no code path can forget it. `judgeflow show <session>` reads it newest first.

Revision ID: 0025
Revises: 0024 (24_sessions.py)
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    op.create_table(
        "session_scores",
        sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("score", sa.Float),
        sa.Column("passed", sa.Boolean),
        sa.Column("reason", sa.Text),
        sa.Column("error", sa.Text),
        # the turns the judged conversation had (eval_results.details->'turns')
        sa.Column("turns", sa.Integer),
        sa.Column("metric_version", sa.Text),
        sa.Column("flow_run_id", sa.Text),
        sa.Column("judged_at", sa.DateTime(timezone=True), nullable=False),
        schema=S,
    )
    op.create_index("session_scores_session_idx", "session_scores", ["session_id", "metric", "judged_at"], schema=S)
    op.execute(
        """
        CREATE FUNCTION judgeflow.session_score_history() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO judgeflow.session_scores
                (session_id, metric, status, score, passed, reason, error, turns, metric_version, flow_run_id,
                 judged_at)
            VALUES (NEW.trace_id, NEW.metric, NEW.status, NEW.score, NEW.passed, NEW.reason, NEW.error,
                    CASE WHEN jsonb_typeof(NEW.details -> 'turns') = 'number'
                         THEN (NEW.details ->> 'turns')::numeric::int END,
                    NEW.metric_version, NEW.flow_run_id, NEW.scored_at);
            RETURN NULL;
        END $$
        """
    )
    # WHEN: a trace's row costs one comparison, never a function call; an update that is not a new
    # judging (a segment filled in, a note on the row) leaves scored_at alone and adds no entry
    op.execute(
        "CREATE TRIGGER eval_results_session_history AFTER INSERT ON judgeflow.eval_results "
        "FOR EACH ROW WHEN (NEW.trace_id LIKE 's:%') EXECUTE FUNCTION judgeflow.session_score_history()"
    )
    op.execute(
        "CREATE TRIGGER eval_results_session_history_update AFTER UPDATE ON judgeflow.eval_results "
        "FOR EACH ROW WHEN (NEW.trace_id LIKE 's:%' AND OLD.scored_at IS DISTINCT FROM NEW.scored_at) "
        "EXECUTE FUNCTION judgeflow.session_score_history()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER eval_results_session_history_update ON judgeflow.eval_results")
    op.execute("DROP TRIGGER eval_results_session_history ON judgeflow.eval_results")
    op.execute("DROP FUNCTION judgeflow.session_score_history()")
    op.drop_index("session_scores_session_idx", table_name="session_scores", schema=S)
    op.drop_table("session_scores", schema=S)
