"""Alembic environment. Always driven from code (judgeflow.db.migrate), which
passes an open connection; there is no alembic.ini to keep in sync."""

from alembic import context
from sqlalchemy import text

from judgeflow.db.schema import SCHEMA, metadata

connection = context.config.attributes["connection"]
connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{SCHEMA}"'))
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table_schema=SCHEMA,
    include_schemas=True,
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
