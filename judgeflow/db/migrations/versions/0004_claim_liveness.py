"""claims tied to a live run: the owner's advisory-lock key

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

S = "judgeflow"


def upgrade() -> None:
    # placeholder in the migration chain; filled in by the change that needs it
    pass


def downgrade() -> None:
    pass
