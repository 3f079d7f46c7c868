-- The stack's roles and databases, run once when the data volume is first
-- initialised (by 10-judgeflow.sh, as the superuser POSTGRES_USER in
-- POSTGRES_DB = judgeflow) with psql variables:
--   app_password      judgeflow's role (PG_JUDGEFLOW_PASSWORD)
--   prefect_password  the Prefect server's role (PREFECT_DB_PASSWORD)
-- psql quotes each :'variable' as a literal, so any password is safe here.
-- The role and database names are variables too, with the stack's names as
-- defaults (tests/docker/ runs this file in the test suite's cluster).
\set ON_ERROR_STOP on
\if :{?app_role}
\else
  \set app_role judgeflow
\endif
\if :{?prefect_role}
\else
  \set prefect_role prefect
\endif
\if :{?prefect_db}
\else
  \set prefect_db prefect
\endif

-- judgeflow: owns its schema (results, claims, alerts, migrations) and only
-- reads the trace source; it cannot create anything elsewhere
CREATE ROLE :"app_role" LOGIN PASSWORD :'app_password';
-- the Prefect server: its own database, nothing of judgeflow's
CREATE ROLE :"prefect_role" LOGIN PASSWORD :'prefect_password';
CREATE DATABASE :"prefect_db" OWNER :"prefect_role";
REVOKE ALL ON DATABASE :"prefect_db" FROM PUBLIC;

-- this database (judgeflow's): connect, nothing else
REVOKE ALL ON DATABASE :"DBNAME" FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"DBNAME" TO :"app_role";
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO :"app_role";
CREATE SCHEMA judgeflow AUTHORIZATION :"app_role";

-- judgeflow's default trace source, so the nightly run works before your app
-- logs anything (the same DDL as judgeflow.sources.table.CREATE_DEFAULT_TABLE;
-- a test keeps them equal). Owned by the superuser: your app writes it;
-- judgeflow only reads it. (Unqualified, as in judgeflow's DDL; in public.)
SET search_path TO public;
CREATE TABLE IF NOT EXISTS llm_traces (
    id          text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    input       text,
    output      text,
    context     jsonb,
    metadata    jsonb
);
CREATE INDEX IF NOT EXISTS llm_traces_created_at_idx ON llm_traces (created_at);
GRANT SELECT ON public.llm_traces TO :"app_role";
-- a table this superuser creates in public later is readable by judgeflow too
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO :"app_role";
