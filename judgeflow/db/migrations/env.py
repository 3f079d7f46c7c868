"""Alembic environment. Always driven from code (judgeflow.db.migrate), which
passes an open connection; there is no alembic.ini to keep in sync."""

from alembic import context
from sqlalchemy import text

from judgeflow.db.schema import SCHEMA, metadata

connection = context.config.attributes["connection"]
# only when missing: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the
# schema is there, which a least-privilege role that owns the schema has not (docker/postgres/roles.sql)
if connection.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :name"), {"name": SCHEMA}).first() is None:
    connection.execute(text(f'CREATE SCHEMA "{SCHEMA}"'))
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table_schema=SCHEMA,
    include_schemas=True,
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
