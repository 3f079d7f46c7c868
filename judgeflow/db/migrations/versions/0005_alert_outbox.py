"""alert notifications as an outbox, delivered at least once

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # placeholder in the migration chain; filled in by the change that needs it
    pass


def downgrade() -> None:
    pass
