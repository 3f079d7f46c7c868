#!/bin/sh
# Run once by the postgres image when its data volume is first initialised
# (docker-entrypoint-initdb.d): the roles and databases of roles.sql, with the
# passwords passed as psql variables (never written into a file).
set -eu
psql --no-psqlrc -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v app_password="$PG_JUDGEFLOW_PASSWORD" -v prefect_password="$PREFECT_DB_PASSWORD" \
    -f /judgeflow-init/roles.sql
