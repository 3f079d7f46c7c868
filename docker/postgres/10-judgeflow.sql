-- Run once by the postgres image when its data volume is first initialised
-- (docker-entrypoint-initdb.d), as POSTGRES_USER in POSTGRES_DB (judgeflow).

-- the Prefect server's own database (same role: this is a single-host stack;
-- give Prefect its own role and server in production)
CREATE DATABASE prefect;

-- judgeflow's default trace source, so the nightly run works before your app
-- logs anything (the same DDL as judgeflow.db.source.CREATE_DEFAULT_TABLE;
-- a test keeps them equal). judgeflow only reads it.
CREATE TABLE IF NOT EXISTS llm_traces (
    id          text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    input       text,
    output      text,
    context     jsonb,
    metadata    jsonb
);
CREATE INDEX IF NOT EXISTS llm_traces_created_at_idx ON llm_traces (created_at);
