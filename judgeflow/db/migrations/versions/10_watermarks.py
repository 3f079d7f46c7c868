"""reads that grow with new work: watermarks, an index on failed results, result counts kept by triggers

Revision ID: 0008
Revises: 0010 (09_judge_epochs.py)
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0010"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    _create_watermarks()
    _count_results_by_triggers()


def _create_watermarks() -> None:
    # Per source, metric and scope (the sample rate): every source row created
    # before scored_through has a result for the metric (judgeflow/db/watermark.py).
    op.create_table(
        "watermarks",
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("scored_through", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("flow_run_id", sa.Text),
        sa.PrimaryKeyConstraint("source", "metric", "scope", name="watermarks_pkey"),
        schema=S,
    )
    # failed pairs older than a run's window are found here, not in the source
    op.create_index(
        "eval_results_failed_time_idx", "eval_results", ["trace_created_at", "trace_id"], schema=S,
        postgresql_where=sa.text("status = 'failed'"),
    )


def _count_results_by_triggers() -> None:
    # Counts of eval_results kept by statement triggers, as deltas (one row per
    # group and statement, so concurrent writers never wait on one counter row);
    # summed by `judgeflow status`, compacted by each run.
    op.create_table(
        "result_counts",
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("passed", sa.Boolean),
        sa.Column("failed_runs", sa.Integer, nullable=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        schema=S,
    )
    op.execute(
        """
        CREATE FUNCTION judgeflow.count_results() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                INSERT INTO judgeflow.result_counts (metric, status, passed, failed_runs, n)
                SELECT metric, status, passed, failed_runs, count(*) FROM new_rows GROUP BY 1, 2, 3, 4;
            ELSIF TG_OP = 'UPDATE' THEN
                INSERT INTO judgeflow.result_counts (metric, status, passed, failed_runs, n)
                SELECT metric, status, passed, failed_runs, sum(n) FROM (
                    SELECT metric, status, passed, failed_runs, 1 AS n FROM new_rows
                    UNION ALL
                    SELECT metric, status, passed, failed_runs, -1 FROM old_rows
                ) d GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0;
            ELSIF TG_OP = 'DELETE' THEN
                INSERT INTO judgeflow.result_counts (metric, status, passed, failed_runs, n)
                SELECT metric, status, passed, failed_runs, -count(*) FROM old_rows GROUP BY 1, 2, 3, 4;
            ELSE  -- TRUNCATE
                DELETE FROM judgeflow.result_counts;
            END IF;
            RETURN NULL;
        END $$
        """
    )
    _create_count_triggers()
    # the triggers hold their lock on eval_results until this commits: no write is missed
    op.execute(
        "INSERT INTO judgeflow.result_counts (metric, status, passed, failed_runs, n) "
        "SELECT metric, status, passed, failed_runs, count(*) FROM judgeflow.eval_results GROUP BY 1, 2, 3, 4"
    )


def _create_count_triggers() -> None:
    op.execute(
        "CREATE TRIGGER eval_results_count_insert AFTER INSERT ON judgeflow.eval_results "
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION judgeflow.count_results()"
    )
    op.execute(
        "CREATE TRIGGER eval_results_count_update AFTER UPDATE ON judgeflow.eval_results "
        "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT "
        "EXECUTE FUNCTION judgeflow.count_results()"
    )
    op.execute(
        "CREATE TRIGGER eval_results_count_delete AFTER DELETE ON judgeflow.eval_results "
        "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION judgeflow.count_results()"
    )
    op.execute(
        "CREATE TRIGGER eval_results_count_truncate AFTER TRUNCATE ON judgeflow.eval_results "
        "FOR EACH STATEMENT EXECUTE FUNCTION judgeflow.count_results()"
    )


def downgrade() -> None:
    for event in ("insert", "update", "delete", "truncate"):
        op.execute(f"DROP TRIGGER IF EXISTS eval_results_count_{event} ON judgeflow.eval_results")
    op.execute("DROP FUNCTION IF EXISTS judgeflow.count_results()")
    op.drop_table("result_counts", schema=S)
    op.drop_index("eval_results_failed_time_idx", table_name="eval_results", schema=S)
    op.drop_table("watermarks", schema=S)
