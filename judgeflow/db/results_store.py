"""The results store: result rows upserted and their claims released in one
transaction, with late duplicates and lost claims recorded as superseded.

Only the claim's current owner writes a pair's row; a done row is replaced
only by a re-score's new score; a row the database refuses is stored as a
'failed' row saying why. Retried with backoff so a restarting database does
not cost judge calls.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

from judgeflow.sources.identity import result_source
from judgeflow.db.engine import engine_for
from judgeflow.db.storable import storable
from judgeflow.errors import DatabaseError
from judgeflow.config.settings import Settings

log = logging.getLogger("judgeflow.scoring")

ERROR_TEXT_MAX = 2000
_WRITE_ATTEMPTS = 6  # backoff doubling from 0.5 s: rides through a database restart

_COLUMNS = (
    "trace_id text, metric text, metric_version text, status text, score float8, passed boolean, "
    "threshold float8, reason text, details jsonb, judge_model text, prompt_tokens bigint, "
    "completion_tokens bigint, cached_tokens bigint, cost_usd float8, latency_ms float8, judge_calls int, error text, "
    "error_kind text, attempts int, flow_run_id text, trace_created_at timestamptz, segment jsonb, content_hash text"
)
_NAMES = ", ".join(c.split()[0] for c in _COLUMNS.split(", "))
# a row built without a segment (none configured) stores '{}'; without cached tokens (a judge that
# reports none), 0
_SELECTED = (_NAMES.replace("segment", "COALESCE(segment, '{}'::jsonb)")
             .replace("cached_tokens", "COALESCE(cached_tokens, 0)"))

# Many rows in one statement: the rows travel as one JSON array.
_UPSERT = text(
    f"""
    INSERT INTO judgeflow.eval_results AS r ({_NAMES}, failed_runs, scored_at, source)
    SELECT {_SELECTED}, CASE WHEN status = 'failed' THEN 1 ELSE 0 END, now(), :source
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x({_COLUMNS})
    ON CONFLICT (trace_id, metric) DO UPDATE SET
        metric_version = excluded.metric_version, status = excluded.status, score = excluded.score,
        passed = excluded.passed, threshold = excluded.threshold, reason = excluded.reason,
        details = excluded.details, judge_model = excluded.judge_model,
        prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
        cached_tokens = excluded.cached_tokens, cost_usd = excluded.cost_usd, latency_ms = excluded.latency_ms,
        judge_calls = excluded.judge_calls, error = excluded.error, error_kind = excluded.error_kind,
        attempts = r.attempts + excluded.attempts, flow_run_id = excluded.flow_run_id,
        trace_created_at = excluded.trace_created_at, segment = excluded.segment, content_hash = excluded.content_hash,
        scored_at = now(), source = excluded.source,
        failed_runs = r.failed_runs + excluded.failed_runs
    -- a done result is only replaced when re-scoring, and only by a new score:
    -- never by a late duplicate, never by a failed re-score (see _NOTE_FAILED_RESCORE);
    -- a session's by the judging of the session grown since (another number of turns: its
    -- earlier rows stay in session_scores, 25_session_scores.py)
    WHERE r.status = 'failed' OR (CAST(:rescore_before AS timestamptz) IS NOT NULL
                                  AND r.scored_at < CAST(:rescore_before AS timestamptz)
                                  AND excluded.status <> 'failed')
       OR (excluded.trace_id LIKE 's:%' AND excluded.details ? 'turns'
           AND (r.details -> 'turns') IS DISTINCT FROM (excluded.details -> 'turns'))
    RETURNING r.trace_id, r.metric
    """
)
# A re-score that failed keeps the score it was meant to replace; the attempt
# is noted on it, so the next --rescore tries again and people can see why.
_NOTE_FAILED_RESCORE = text(
    f"""
    UPDATE judgeflow.eval_results r SET details = r.details || jsonb_build_object(
        'failed_rescores', COALESCE((r.details ->> 'failed_rescores')::int, 0) + 1,
        'last_failed_rescore', jsonb_build_object(
            'at', now(), 'error', x.error, 'error_kind', x.error_kind, 'flow_run_id', x.flow_run_id))
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x({_COLUMNS})
    WHERE r.trace_id = x.trace_id AND r.metric = x.metric AND x.status = 'failed' AND r.status <> 'failed'
      AND CAST(:rescore_before AS timestamptz) IS NOT NULL AND r.scored_at < CAST(:rescore_before AS timestamptz)
    RETURNING r.trace_id, r.metric
    """
)
_RELEASE = text(
    """
    DELETE FROM judgeflow.claims c
    USING unnest(CAST(:trace_ids AS text[]), CAST(:metrics AS text[])) AS k(trace_id, metric)
    WHERE c.trace_id = k.trace_id AND c.metric = k.metric AND c.owner = :owner
    """
)
# The pairs whose claim ``owner`` still holds, locked until the write commits so
# no other run can take one over between this check and the upsert.
_OWNED = text(
    """
    SELECT c.trace_id, c.metric FROM judgeflow.claims c
    JOIN unnest(CAST(:trace_ids AS text[]), CAST(:metrics AS text[])) AS k(trace_id, metric)
      ON c.trace_id = k.trace_id AND c.metric = k.metric
    WHERE c.owner = :owner
    FOR UPDATE OF c
    """
)
_SUPERSEDED = text(
    """
    INSERT INTO judgeflow.superseded_results
        (trace_id, metric, status, score, judge_calls, cost_usd, flow_run_id, why, owner)
    SELECT trace_id, metric, status, score, judge_calls, cost_usd, flow_run_id, why, :owner
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x(
        trace_id text, metric text, status text, score float8, judge_calls int, cost_usd float8,
        flow_run_id text, why text)
    """
)
_IDLE_LIMIT = text("SET LOCAL idle_in_transaction_session_timeout = '30s'")
CLAIM_LOST = "the claim had moved to another run"
DONE_EXISTS = "a done result was already stored"


def _json_default(value):
    return value.isoformat() if isinstance(value, datetime) else str(value)


class StoredPairs(set):
    """The (trace, metric) pairs whose row was written. ``refused`` maps a pair
    whose row the database refused to why (a 'failed' row saying so was stored
    instead, when possible); ``kept`` holds pairs whose failed re-score left
    the previous score in place."""

    def __init__(self, pairs=(), *, refused: dict | None = None, kept: set | None = None):
        super().__init__(pairs)
        self.refused: dict[tuple[str, str], str] = dict(refused or {})
        self.kept: set[tuple[str, str]] = set(kept or ())

    def merge(self, other: "StoredPairs") -> None:
        self |= other
        self.refused.update(other.refused)
        self.kept |= other.kept


def _write(settings: Settings, rows: list[dict], owner: str, rescore_before: datetime | None) -> StoredPairs:
    keys = {"trace_ids": [r["trace_id"] for r in rows], "metrics": [r["metric"] for r in rows], "owner": owner}
    with engine_for(settings).begin() as conn:
        # A process frozen (SIGSTOP, a stalled VM) inside this transaction holds
        # the claims' row locks, and a run taking its pairs over would wait for
        # as long as it stays frozen: the server ends such a session instead
        # (this run then retries the write, and finds the claims gone).
        conn.execute(_IDLE_LIMIT)
        owned = {(t, m) for t, m in conn.execute(_OWNED, keys).all()}
        # only the claim's current owner writes: a run that lost the claim (it
        # was frozen past its lease, say) must not race the run that took it over
        mine = [r for r in rows if (r["trace_id"], r["metric"]) in owned]
        written: set[tuple[str, str]] = set()
        kept: set[tuple[str, str]] = set()
        if mine:
            params = {"rows": json.dumps(mine, default=_json_default), "rescore_before": rescore_before}
            written = {(t, m) for t, m in conn.execute(_UPSERT, {**params, "source": result_source(settings)})}
            if rescore_before is not None:
                kept = {(t, m) for t, m in conn.execute(_NOTE_FAILED_RESCORE, params)}
        late = [
            {
                "trace_id": r["trace_id"], "metric": r["metric"], "status": r["status"], "score": r["score"],
                "judge_calls": r["judge_calls"], "cost_usd": r["cost_usd"], "flow_run_id": r["flow_run_id"],
                "why": DONE_EXISTS if (r["trace_id"], r["metric"]) in owned else CLAIM_LOST,
            }
            for r in rows
            if (r["trace_id"], r["metric"]) not in written and (r["trace_id"], r["metric"]) not in kept
        ]
        if late:
            conn.execute(_SUPERSEDED, {"rows": json.dumps(late, default=_json_default), "owner": owner})
        if owned:
            conn.execute(_RELEASE, keys)
    for row in late:
        log.warning("%s for trace %s superseded: %s; the stored result stands", row["metric"], row["trace_id"],
                    row["why"])
    return StoredPairs(written, kept=kept)


def store_outcomes(
    settings: Settings, rows: list[dict], *, owner: str, rescore_before: datetime | None,
    _fallback: bool = False,
) -> StoredPairs:
    """Upsert result rows and release their claims in one transaction; returns
    the (trace, metric) pairs written. A pair missing was superseded: its claim
    had moved to another run, or a done row existed already; it is recorded in
    ``judgeflow.superseded_results`` instead.
    Retries with backoff so a restarting database does not cost judge calls.
    A row the database refuses (not a connection problem) is isolated by
    writing the rows one at a time, so it cannot take the others down with it;
    it is then stored as a 'failed' row saying why (see :class:`StoredPairs`),
    never raised: its task and its run go on."""
    if not rows:
        return StoredPairs()
    delay = 0.5
    for attempt in range(1, _WRITE_ATTEMPTS + 1):
        try:
            return _write(settings, rows, owner, rescore_before)
        except OperationalError as exc:
            if attempt == _WRITE_ATTEMPTS:
                raise DatabaseError(
                    f"could not store {len(rows)} result(s) (first: trace {rows[0]['trace_id']!r}, "
                    f"{rows[0]['metric']}): {type(exc.orig).__name__}: {exc.orig}"
                ) from None
            log.warning("storing results failed (%s), retrying in %.1fs", type(exc.orig).__name__, delay)
            time.sleep(delay)
            delay *= 2
        except DBAPIError as exc:
            if len(rows) == 1:
                return _store_refused(settings, rows[0], exc, owner=owner, rescore_before=rescore_before,
                                      fallback=_fallback)
            written = StoredPairs()
            for row in rows:
                written.merge(store_outcomes(settings, [row], owner=owner, rescore_before=rescore_before))
            return written
    raise AssertionError("unreachable")


def _store_refused(
    settings: Settings, row: dict, exc: DBAPIError, *, owner: str, rescore_before: datetime | None, fallback: bool
) -> StoredPairs:
    """The database refused ``row`` (a constraint, a value it cannot hold):
    store a 'failed' row that says so instead. If even that is refused, the
    pair is left unwritten (its claim expires; the next run tries again)."""
    pair = (row["trace_id"], row["metric"])
    why = f"could not store the result: {type(exc.orig).__name__}: {exc.orig}"
    why = storable(why[:ERROR_TEXT_MAX])[0]
    log.error("%s for trace %s: %s", row["metric"], row["trace_id"], why)
    if fallback:
        return StoredPairs(refused={pair: why})
    failure = {
        **row, "metric_version": row.get("metric_version"), "status": "failed", "score": None, "passed": None,
        "reason": None, "details": {"unstorable": {"status": row.get("status"), "error": why}},
        "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "cost_usd": None,
        "latency_ms": None, "error": why, "error_kind": "unstorable",
    }
    stored = store_outcomes(settings, [failure], owner=owner, rescore_before=rescore_before, _fallback=True)
    stored.refused.setdefault(pair, why)
    return stored


def store_outcome(settings: Settings, row: dict, *, owner: str, rescore_before: datetime | None) -> StoredPairs:
    """One row (see :func:`store_outcomes`); empty when a done row already existed."""
    return store_outcomes(settings, [row], owner=owner, rescore_before=rescore_before)


def release_pairs(settings: Settings, pairs: list[tuple[str, str]], owner: str) -> None:
    """Give back claims on pairs this run will not score after all."""
    if pairs:
        with engine_for(settings).begin() as conn:
            conn.execute(_RELEASE, {"trace_ids": [t for t, _ in pairs], "metrics": [m for _, m in pairs],
                                    "owner": owner})


