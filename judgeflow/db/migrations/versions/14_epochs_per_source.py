"""judge epochs per source: each source keeps its own judge history (issue 47)

Revision ID: 0014
Revises: 0013 (13_open_metric_names.py)
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

S = "judgeflow"

# An epoch recorded before this revision belongs to the source whose results its
# flow run wrote (one source per run); with a single source in the database, to it.
_BY_RUN = f"""
UPDATE {S}.judge_epochs e SET source = r.source
FROM (SELECT flow_run_id, min(source) AS source FROM {S}.eval_results
      WHERE flow_run_id IS NOT NULL AND source IS NOT NULL
      GROUP BY flow_run_id HAVING count(DISTINCT source) = 1) r
WHERE e.source = '' AND e.flow_run_id = r.flow_run_id
"""
_ONLY_SOURCE = f"""
UPDATE {S}.judge_epochs SET source = (SELECT min(source) FROM {S}.result_sources)
WHERE source = '' AND (SELECT count(*) FROM {S}.result_sources) = 1
"""
# Runs of two sources took turns recording "changes" in the shared table: once
# each epoch is its source's, an epoch repeating its source's previous one of the
# metric is no change and goes, so each source keeps its baseline.
_REPEATS = f"""
DELETE FROM {S}.judge_epochs e USING (
    SELECT id, lag(metric_version) OVER w AS version, lag(judge_model) OVER w AS model
    FROM {S}.judge_epochs WINDOW w AS (PARTITION BY source, metric ORDER BY started_at, id)
) p
WHERE e.id = p.id AND p.version = e.metric_version AND p.model = e.judge_model
"""


def upgrade() -> None:
    # '' until assigned: epochs no run can be traced to go to the first source
    # that runs a command with settings (judgeflow/db/result_sources.py)
    op.add_column("judge_epochs", sa.Column("source", sa.Text, nullable=False, server_default=""), schema=S)
    op.execute(_BY_RUN)
    op.execute(_ONLY_SOURCE)
    op.execute(_REPEATS)
    op.drop_index("judge_epochs_metric_started_idx", table_name="judge_epochs", schema=S)
    op.create_index("judge_epochs_source_metric_started_idx", "judge_epochs", ["source", "metric", "started_at", "id"],
                    schema=S)


def downgrade() -> None:
    op.drop_index("judge_epochs_source_metric_started_idx", table_name="judge_epochs", schema=S)
    op.create_index("judge_epochs_metric_started_idx", "judge_epochs", ["metric", "started_at", "id"], schema=S)
    op.drop_column("judge_epochs", "source", schema=S)
