"""judgeflow's own tables, all in the ``judgeflow`` schema.

Alembic migrations in ``judgeflow/db/migrations`` create them; these Core
table objects are what queries are written against.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

SCHEMA = "judgeflow"
metadata = MetaData(schema=SCHEMA)

RESULT_STATUSES = ("scored", "skipped", "failed")
# A (trace, metric) in one of these states is done: never selected again
# unless re-scoring is asked for. 'failed' is picked up by the next run.
DONE_STATUSES = ("scored", "skipped")

eval_results = Table(
    "eval_results",
    metadata,
    Column("trace_id", Text, nullable=False),
    Column("metric", Text, nullable=False),
    Column("metric_version", Text),
    Column("status", Text, nullable=False),
    Column("score", Float),
    Column("passed", Boolean),
    Column("threshold", Float),
    Column("reason", Text),
    Column("details", JSONB, nullable=False, server_default="{}"),
    Column("judge_model", Text),
    Column("prompt_tokens", BigInteger, nullable=False, server_default="0"),
    Column("completion_tokens", BigInteger, nullable=False, server_default="0"),
    # of prompt_tokens, those the provider served from its prompt cache (billed at its cached rate)
    Column("cached_tokens", BigInteger, nullable=False, server_default="0"),
    Column("cost_usd", Float),
    Column("latency_ms", Float),
    Column("judge_calls", Integer, nullable=False, server_default="0"),
    Column("error", Text),
    Column("error_kind", Text),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # runs in which this pair ended 'failed'; see JUDGEFLOW_MAX_RUNS_PER_PAIR
    Column("failed_runs", Integer, nullable=False, server_default="0"),
    Column("flow_run_id", Text),
    Column("trace_created_at", DateTime(timezone=True)),
    Column("scored_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # the trace's JUDGEFLOW_ALERT_SEGMENT_BY metadata values when it was scored (migration 06_segments.py)
    Column("segment", JSONB, nullable=False, server_default="{}"),
    # sha256 of what the result depends on (judgeflow/run/reuse.py); indexed for done rows (migration 07_content_hash.py)
    Column("content_hash", Text),
    # the source the trace was read from (judgeflow/sources/identity.py; migration 11_result_sources.py)
    Column("source", Text),
    # the Phoenix write-back's outbox state (judgeflow/phoenix/outbox.py; migration 11_result_sources.py)
    Column("written_back_at", DateTime(timezone=True)),
    Column("write_back_error", Text),
    Column("write_back_tries", Integer, nullable=False, server_default="0"),
    Column("write_back_next_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("trace_id", "metric", name="eval_results_pkey"),
    CheckConstraint("status IN ('scored', 'skipped', 'failed')", name="eval_results_status_check"),
    CheckConstraint("score IS NULL OR (score >= 0 AND score <= 1)", name="eval_results_score_check"),
    Index(
        "eval_results_content_hash_idx", "content_hash",
        postgresql_where=text("content_hash IS NOT NULL AND status IN ('scored', 'skipped')"),
    ),
)

claims = Table(
    "claims",
    metadata,
    Column("trace_id", Text, nullable=False),
    Column("metric", Text, nullable=False),
    Column("owner", Text, nullable=False),
    Column("claimed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("lease_expires_at", DateTime(timezone=True), nullable=False),
    # key of the owning run's advisory lock (judgeflow.db.pending.RUN_LOCK_NAMESPACE);
    # NULL: the lease alone decides whether the claim is held
    Column("owner_key", BigInteger),
    PrimaryKeyConstraint("trace_id", "metric", name="claims_pkey"),
)

# Late results of runs that had lost the pair's claim: recorded, never written
# over eval_results.
superseded_results = Table(
    "superseded_results",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("trace_id", Text, nullable=False),
    Column("metric", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("score", Float),
    Column("judge_calls", Integer, nullable=False, server_default="0"),
    Column("cost_usd", Float),
    Column("flow_run_id", Text),
    Column("owner", Text, nullable=False),
    Column("why", Text, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
