"""`judgeflow results --failed` and `--errors`: the rows that did not pass and the rows the judge could
not score, per metric newest first, through indexes of their own, so a listing costs the rows shown
however rare they are among millions (judgeflow/db/result_listing.py)

Revision ID: 0020
Revises: 0019 (19_judge_batches.py)
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # the conditions are judgeflow/db/result_listing.py's KINDS: a query uses a partial index only
    # when its WHERE implies the index's
    op.create_index("eval_results_not_passed_idx", "eval_results", ["metric", "trace_created_at"], schema=S,
                    postgresql_where=sa.text("status = 'scored' AND passed IS FALSE"))
    op.create_index("eval_results_errors_idx", "eval_results", ["metric", "trace_created_at"], schema=S,
                    postgresql_where=sa.text("status = 'failed'"))


def downgrade() -> None:
    op.drop_index("eval_results_errors_idx", table_name="eval_results", schema=S)
    op.drop_index("eval_results_not_passed_idx", table_name="eval_results", schema=S)
