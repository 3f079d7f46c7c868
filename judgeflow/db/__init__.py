"""judgeflow's database access: engines, schema, migrations, the trace source,
and the embedded PostgreSQL used when no database URL is configured."""
