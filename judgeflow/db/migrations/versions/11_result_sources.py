"""results kept per source; the Phoenix write-back's state per result (issue 41)

Revision ID: 0011
Revises: 0008 (10_watermarks.py)
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0008"
branch_labels = None
depends_on = None

S = "judgeflow"

# the counting trigger of 10_watermarks.py, with the source: `judgeflow status` counts one source's results
_COUNT_FUNCTION = """
CREATE OR REPLACE FUNCTION judgeflow.count_results() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO judgeflow.result_counts (source, metric, status, passed, failed_runs, n)
        SELECT source, metric, status, passed, failed_runs, count(*) FROM new_rows GROUP BY 1, 2, 3, 4, 5;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO judgeflow.result_counts (source, metric, status, passed, failed_runs, n)
        SELECT source, metric, status, passed, failed_runs, sum(n) FROM (
            SELECT source, metric, status, passed, failed_runs, 1 AS n FROM new_rows
            UNION ALL
            SELECT source, metric, status, passed, failed_runs, -1 FROM old_rows
        ) d GROUP BY 1, 2, 3, 4, 5 HAVING sum(n) <> 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO judgeflow.result_counts (source, metric, status, passed, failed_runs, n)
        SELECT source, metric, status, passed, failed_runs, -count(*) FROM old_rows GROUP BY 1, 2, 3, 4, 5;
    ELSE  -- TRUNCATE
        DELETE FROM judgeflow.result_counts;
    END IF;
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    # The source a result was read from (judgeflow/sources/identity.py). Rows
    # written before this revision have NULL: the first command run with settings
    # assigns them to the source configured then (judgeflow/db/result_sources.py).
    op.add_column("eval_results", sa.Column("source", sa.Text), schema=S)
    op.create_index("eval_results_unsourced_idx", "eval_results", ["trace_id"], schema=S,
                    postgresql_where=sa.text("source IS NULL"))
    # The Phoenix write-back's outbox state: a scored result of a Phoenix source is
    # unwritten while written_back_at is NULL or older than scored_at (a re-score).
    op.add_column("eval_results", sa.Column("written_back_at", sa.DateTime(timezone=True)), schema=S)
    op.add_column("eval_results", sa.Column("write_back_error", sa.Text), schema=S)
    op.add_column("eval_results", sa.Column("write_back_tries", sa.Integer, nullable=False,
                                            server_default="0"), schema=S)
    op.add_column("eval_results", sa.Column("write_back_next_at", sa.DateTime(timezone=True)), schema=S)
    op.create_index(
        "eval_results_unwritten_idx", "eval_results", ["source", "scored_at"], schema=S,
        postgresql_where=sa.text(
            "status = 'scored' AND source LIKE 'phoenix:%' AND (written_back_at IS NULL OR written_back_at < scored_at)"
        ),
    )
    # skipped results per source (the preset's skips with their reasons in `judgeflow status`)
    op.create_index("eval_results_skipped_idx", "eval_results", ["source", "metric"], schema=S,
                    postgresql_where=sa.text("status = 'skipped'"))
    # every source that wrote here: a new one is announced (judgeflow/db/result_sources.py)
    op.create_table(
        "result_sources",
        sa.Column("source", sa.Text, primary_key=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        schema=S,
    )
    op.add_column("result_counts", sa.Column("source", sa.Text), schema=S)
    # alert state per source: a source never inherits another's (existing rows: '' until assigned)
    op.add_column("alerts", sa.Column("source", sa.Text, nullable=False, server_default=""), schema=S)
    op.drop_constraint("alerts_pkey", "alerts", schema=S, type_="primary")
    op.create_primary_key("alerts_pkey", "alerts", ["source", "rule", "segment_key"], schema=S)
    op.add_column("alert_events", sa.Column("source", sa.Text), schema=S)
    # the triggers hold their lock on eval_results until this commits: no write is missed
    op.execute("LOCK TABLE judgeflow.eval_results IN SHARE MODE")
    op.execute(_COUNT_FUNCTION)
    op.execute("DELETE FROM judgeflow.result_counts")
    op.execute(
        "INSERT INTO judgeflow.result_counts (source, metric, status, passed, failed_runs, n) "
        "SELECT source, metric, status, passed, failed_runs, count(*) FROM judgeflow.eval_results GROUP BY 1, 2, 3, 4, 5"
    )


def downgrade() -> None:
    op.execute("LOCK TABLE judgeflow.eval_results IN SHARE MODE")
    op.execute("DELETE FROM judgeflow.result_counts")
    op.drop_column("result_counts", "source", schema=S)
    op.execute(_COUNT_FUNCTION.replace("source, ", "").replace("1, 2, 3, 4, 5", "1, 2, 3, 4"))
    op.execute(
        "INSERT INTO judgeflow.result_counts (metric, status, passed, failed_runs, n) "
        "SELECT metric, status, passed, failed_runs, count(*) FROM judgeflow.eval_results GROUP BY 1, 2, 3, 4"
    )
    op.drop_table("result_sources", schema=S)
    op.drop_column("alert_events", "source", schema=S)
    op.execute("DELETE FROM judgeflow.alerts a USING judgeflow.alerts b WHERE a.rule = b.rule "
               "AND a.segment_key = b.segment_key AND a.source > b.source")  # one state per rule again
    op.drop_constraint("alerts_pkey", "alerts", schema=S, type_="primary")
    op.create_primary_key("alerts_pkey", "alerts", ["rule", "segment_key"], schema=S)
    op.drop_column("alerts", "source", schema=S)
    for index in ("eval_results_skipped_idx", "eval_results_unwritten_idx", "eval_results_unsourced_idx"):
        op.drop_index(index, table_name="eval_results", schema=S)
    for column in ("write_back_next_at", "write_back_tries", "write_back_error", "written_back_at", "source"):
        op.drop_column("eval_results", column, schema=S)
