"""the result rollup: counts per (source, metric, version, judge epoch mark, trace hour, status, passed, segment value, sample class), kept on write (issue 50)

Revision ID: 0016
Revises: 0015 (15_sample_ledger.py)
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

S = "judgeflow"
DIMS = ("source, metric, metric_version, epoch_mark, trace_hour, status, passed, seg_key, seg_value, "
        "s_night, s_stratum, s_prob")

# A result's epoch mark: the latest start of a judge epoch of its metric, of any
# source, at or before it was scored. For any epoch E of the metric,
# "scored at or after E started" is "mark at or after E started" (E's start is
# one of the starts the mark is the latest of), so every source's epoch in
# force is decided from the mark (judgeflow/db/rollup.py).
MARK = (f"(SELECT max(e.started_at) FROM {S}.judge_epochs e "
        "WHERE e.metric = r.metric AND e.started_at <= r.scored_at)")
HOUR = "date_trunc('hour', r.trace_created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"

# The newest and oldest trace times, per metric from the ends of the window
# index (metrics found by skipping through its first column): no scan.
ENDS = f"""
    WITH RECURSIVE metrics AS (
        SELECT min(metric) AS metric FROM {S}.eval_results
        UNION ALL
        SELECT (SELECT min(metric) FROM {S}.eval_results WHERE metric > m.metric) FROM metrics m
        WHERE m.metric IS NOT NULL
    )
    SELECT max((SELECT max(trace_created_at) FROM {S}.eval_results r WHERE r.metric = m.metric)) AS newest,
           min((SELECT min(trace_created_at) FROM {S}.eval_results r WHERE r.metric = m.metric)) AS oldest
    FROM metrics m WHERE m.metric IS NOT NULL"""


def _contributions(rows: str, sign: str, decisions: str = f"{S}.sample_decisions") -> str:
    """What each result of ``rows`` adds (``sign`` +1) or takes away (-1): one
    line overall (key '') and one per segment key it has a value for, in its
    sample class (the night, stratum and inclusion probability of its trace's
    decision in ``decisions``; none: probability 1)."""
    return f"""
        SELECT r.source, r.metric, r.metric_version, r.epoch_mark, r.trace_hour, r.status, r.passed,
               s.seg_key, s.seg_value, d.night AS s_night, d.stratum AS s_stratum,
               coalesce(d.inclusion_prob, 1.0) AS s_prob, {sign} AS n, r.scored_at
        FROM (SELECT r.*, {MARK} AS epoch_mark, {HOUR} AS trace_hour FROM {rows} r
              WHERE r.trace_created_at IS NOT NULL) r
        LEFT JOIN {decisions} d ON d.trace_id = r.trace_id
        CROSS JOIN LATERAL (
            SELECT '' AS seg_key, '' AS seg_value
            UNION ALL
            SELECT key, value FROM jsonb_each_text(
                CASE WHEN jsonb_typeof(r.segment) = 'object' THEN r.segment ELSE '{{}}'::jsonb END)
            WHERE value IS NOT NULL
        ) s"""


def _fold(source: str, *, folded: str = "false") -> str:
    return f"""
        INSERT INTO {S}.result_rollup ({DIMS}, n, folded, written_at)
        SELECT {DIMS}, sum(n), {folded}, max(scored_at) FROM ({source}) c
        GROUP BY {DIMS} HAVING sum(n) <> 0"""


# Every rollup line of the metrics and trace hours, recomputed from the results
# in one statement (one snapshot): a delta committed before it is replaced,
# one committed after it is kept, and neither is counted twice.
_RECOMPUTE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION judgeflow.rollup_recompute(p_metrics text[], p_hours timestamptz[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    written bigint;
BEGIN
    WITH gone AS (
        DELETE FROM judgeflow.result_rollup WHERE metric = ANY(p_metrics) AND trace_hour = ANY(p_hours)
    ), fresh AS ({_fold(_contributions(
        "(SELECT x.* FROM unnest(p_hours) h JOIN judgeflow.eval_results x ON x.metric = ANY(p_metrics) "
        "AND x.trace_created_at >= h AND x.trace_created_at < h + interval '1 hour')", "1"), folded="true")}
        RETURNING 1
    ) SELECT count(*) INTO written FROM fresh;
    RETURN written;
END $$
"""

_WRITE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION judgeflow.rollup_results() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- taken before the statements below read anything: a judge epoch being
    -- recorded (SHARE ROW EXCLUSIVE) is committed first and seen by them
    LOCK TABLE judgeflow.result_rollup IN ROW EXCLUSIVE MODE;
    -- and no sample decision is being written meanwhile: each side sees the other's rows
    LOCK TABLE judgeflow.sample_decisions IN SHARE MODE;
    IF TG_OP = 'INSERT' THEN
        {_fold(_contributions("new_rows", "1"))};
    ELSIF TG_OP = 'UPDATE' THEN
        {_fold(_contributions("new_rows", "1") + " UNION ALL " + _contributions("old_rows", "-1"))};
    ELSIF TG_OP = 'DELETE' THEN
        {_fold(_contributions("old_rows", "-1"))};
    ELSE  -- TRUNCATE
        DELETE FROM judgeflow.result_rollup;
    END IF;
    RETURN NULL;
END $$
"""

def _decision_delta(new: str | None, old: str | None) -> str:
    """The results of traces whose decision changed move between sample
    classes: + in the class of the new decision (``new`` rows), - in the old one's."""
    parts = []
    traces = " UNION ".join(f"SELECT trace_id FROM {t}" for t in (new, old) if t)
    rows = f"(SELECT x.* FROM {S}.eval_results x WHERE x.trace_id IN ({traces}))"
    # no decision on one side (inserted or deleted): that side's results have none, probability 1
    none = "(SELECT NULL::text AS trace_id, NULL::date AS night, NULL::text AS stratum, NULL::float8 AS inclusion_prob)"
    for table, sign in ((new, "1"), (old, "-1")):
        parts.append(_contributions(rows, sign, table or none))
    return _fold(" UNION ALL ".join(parts))


_DECISION_FUNCTION = f"""
CREATE OR REPLACE FUNCTION judgeflow.rollup_decisions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE judgeflow.result_rollup IN ROW EXCLUSIVE MODE;
    IF TG_OP = 'INSERT' THEN
        {_decision_delta("new_rows", None)};
    ELSIF TG_OP = 'UPDATE' THEN
        {_decision_delta("new_rows", "old_rows")};
    ELSIF TG_OP = 'DELETE' THEN
        {_decision_delta(None, "old_rows")};
    END IF;
    RETURN NULL;
END $$
"""

# A judge epoch recorded, moved or removed changes the epoch of the results
# scored since it starts: those hours are recomputed. The lock (taken before
# the row is written) waits for the writes in flight and holds new ones until
# this commits, so no write decides its epoch without seeing this one.
_EPOCH_LOCK_FUNCTION = """
CREATE OR REPLACE FUNCTION judgeflow.rollup_epoch_lock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE judgeflow.result_rollup IN SHARE ROW EXCLUSIVE MODE;
    RETURN NULL;
END $$
"""

# Only a start that appears or goes changes marks: an epoch handed to a
# source (judgeflow/db/epochs.py adopt_epochs) changes none.
_EPOCH_CHANGE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {S}.rollup_epochs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed record;
BEGIN
    FOR changed IN EXECUTE format(
        'SELECT metric, min(started_at) AS since FROM (%s) e GROUP BY metric',
        CASE TG_OP WHEN 'INSERT' THEN 'SELECT metric, started_at FROM new_rows'
                   WHEN 'DELETE' THEN 'SELECT metric, started_at FROM old_rows'
                   ELSE '(SELECT metric, started_at FROM new_rows EXCEPT SELECT metric, started_at FROM old_rows) '
                        'UNION ALL (SELECT metric, started_at FROM old_rows '
                        'EXCEPT SELECT metric, started_at FROM new_rows)' END)
    LOOP
        PERFORM {S}.rollup_recompute(ARRAY[changed.metric], ARRAY(
            SELECT DISTINCT trace_hour FROM {S}.result_rollup
            WHERE metric = changed.metric AND written_at >= changed.since));
    END LOOP;
    RETURN NULL;
END $$
"""


def _functions_and_triggers() -> None:
    op.execute(_RECOMPUTE_FUNCTION)
    op.execute(_WRITE_FUNCTION)
    op.execute(_DECISION_FUNCTION)
    op.execute(_EPOCH_LOCK_FUNCTION)
    op.execute(_EPOCH_CHANGE_FUNCTION)
    for event, ref in (("INSERT", "NEW TABLE AS new_rows"), ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
                       ("DELETE", "OLD TABLE AS old_rows")):
        low = event.lower()
        op.execute(f"CREATE TRIGGER eval_results_rollup_{low} AFTER {event} ON {S}.eval_results "
                   f"REFERENCING {ref} FOR EACH STATEMENT EXECUTE FUNCTION {S}.rollup_results()")
        op.execute(f"CREATE TRIGGER sample_decisions_rollup_{low} AFTER {event} ON {S}.sample_decisions "
                   f"REFERENCING {ref} FOR EACH STATEMENT EXECUTE FUNCTION {S}.rollup_decisions()")
        op.execute(f"CREATE TRIGGER judge_epochs_rollup_{low} AFTER {event} ON {S}.judge_epochs "
                   f"REFERENCING {ref} FOR EACH STATEMENT EXECUTE FUNCTION {S}.rollup_epochs_changed()")
    op.execute(f"CREATE TRIGGER eval_results_rollup_truncate AFTER TRUNCATE ON {S}.eval_results "
               f"FOR EACH STATEMENT EXECUTE FUNCTION {S}.rollup_results()")
    op.execute(f"CREATE TRIGGER judge_epochs_rollup_lock BEFORE INSERT OR UPDATE OR DELETE ON {S}.judge_epochs "
               f"FOR EACH STATEMENT EXECUTE FUNCTION {S}.rollup_epoch_lock()")


# The hours a period boundary cuts are read from eval_results by the window
# index: with source and trace id in it too, that read is index-only. Rebuilt
# here only while the table is small; a larger one keeps its index until
# `judgeflow db rollup` builds this one concurrently (judgeflow/db/rollup.py).
SMALL = 100_000


def _cover_window_index_if_small() -> None:
    small = op.get_bind().execute(sa.text(
        f"SELECT count(*) < {SMALL} FROM (SELECT 1 FROM {S}.eval_results LIMIT {SMALL}) r")).scalar()
    if not small:
        return
    op.drop_index("eval_results_metric_created_idx", table_name="eval_results", schema=S)
    op.create_index("eval_results_metric_created_idx", "eval_results", ["metric", "trace_created_at"], schema=S,
                    postgresql_include=["status", "passed", "segment", "metric_version", "scored_at", "source",
                                        "trace_id"])


def upgrade() -> None:
    # One line per (source, metric, metric version, epoch mark, UTC trace hour,
    # status, passed, segment key, segment value, sample class): the results
    # counted. Key '' is overall; a result adds one line per key it has a value
    # for, never one per combination of keys. The sample class is the trace's
    # (night, stratum, inclusion probability), what the stratified estimate
    # groups by (judgeflow/alerts/estimates.py); none: probability 1. Writes
    # add lines of deltas (folded = false); judgeflow/db/rollup.py folds them.
    op.create_table(
        "result_rollup",
        sa.Column("source", sa.Text),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("metric_version", sa.Text),
        sa.Column("epoch_mark", sa.DateTime(timezone=True)),
        sa.Column("trace_hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("passed", sa.Boolean),
        sa.Column("seg_key", sa.Text, nullable=False),
        sa.Column("seg_value", sa.Text, nullable=False),
        sa.Column("s_night", sa.Date),
        sa.Column("s_stratum", sa.Text),
        sa.Column("s_prob", sa.Float, nullable=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.Column("folded", sa.Boolean, nullable=False, server_default=sa.false()),
        # the latest scored_at counted in this line: which hours a judge epoch change recomputes
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
        schema=S,
    )
    op.create_index("result_rollup_hour_idx", "result_rollup", ["trace_hour", "metric"], schema=S)
    op.create_index("result_rollup_deltas_idx", "result_rollup", ["metric", "trace_hour"], schema=S,
                    postgresql_where=sa.text("NOT folded"))
    op.create_index("result_rollup_written_idx", "result_rollup", ["metric", "written_at"], schema=S)
    # Hours at or after built_from are kept by the triggers; older ones are
    # built by `judgeflow db rollup` in batches (readers count them from the
    # results until then). '-infinity': every hour is built.
    op.create_table(
        "rollup_state",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("built_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("oldest_hour", sa.DateTime(timezone=True)),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("id = 1", name="rollup_state_one_row"),
        schema=S,
    )
    _functions_and_triggers()
    _cover_window_index_if_small()
    # The triggers hold their lock on eval_results until this commits, so every
    # result written before them has a trace hour at or before the newest one
    # read here (the index's end: no scan); later hours are the triggers' alone.
    op.execute(
        f"""
        INSERT INTO {S}.rollup_state (id, built_from, oldest_hour)
        SELECT 1, CASE WHEN newest IS NULL THEN '-infinity'
                       ELSE date_trunc('hour', newest AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 hour' END,
                  date_trunc('hour', oldest AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        FROM ({ENDS}) e
        """
    )


def downgrade() -> None:
    op.drop_index("eval_results_metric_created_idx", table_name="eval_results", schema=S)
    op.create_index("eval_results_metric_created_idx", "eval_results", ["metric", "trace_created_at"], schema=S,
                    postgresql_include=["status", "passed", "segment", "metric_version", "scored_at"])
    for table in ("eval_results", "sample_decisions", "judge_epochs"):
        for event in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS {table}_rollup_{event} ON {S}.{table}")
    op.execute(f"DROP TRIGGER IF EXISTS eval_results_rollup_truncate ON {S}.eval_results")
    op.execute(f"DROP TRIGGER IF EXISTS judge_epochs_rollup_lock ON {S}.judge_epochs")
    for function in ("rollup_results", "rollup_decisions", "rollup_epoch_lock", "rollup_epochs_changed"):
        op.execute(f"DROP FUNCTION IF EXISTS {S}.{function}()")
    op.execute(f"DROP FUNCTION IF EXISTS {S}.rollup_recompute(text[], timestamptz[])")
    op.drop_table("rollup_state", schema=S)
    op.drop_table("result_rollup", schema=S)
