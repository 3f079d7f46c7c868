"""segment values copied into judgeflow's tables for per-segment alert rules

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # placeholder in the migration chain; filled in by the change that needs it
    pass


def downgrade() -> None:
    pass
