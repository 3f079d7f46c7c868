"""results that survive messy logs: bigint token counts, failed runs per pair

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # placeholder in the migration chain; filled in by the change that needs it
    pass


def downgrade() -> None:
    pass
