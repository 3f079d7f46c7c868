"""content hash of each scored pair, for reusing identical judgements

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # placeholder in the migration chain; filled in by the change that needs it
    pass


def downgrade() -> None:
    pass
