"""Identical content is judged once (``JUDGEFLOW_REUSE_IDENTICAL``).

Production logs repeat canned replies thousands of times, and judging the same
text again costs the same. A pair's **content hash** covers everything its
result depends on: the metric and its version (prompts and schemas), the judge
(model, and a digest of the API base's real value: another endpoint serving
the same model name is another judge), every setting that changes a score or
its reason (:data:`SCORE_SETTINGS`: include_reason, the field truncation
budget; and the metric's own, its settings' ``score_fields``) and the trace's input,
output and context. Every other setting is declared score-neutral
(:data:`SCORE_NEUTRAL_SETTINGS`); tests/run/test_reuse.py fails for a
setting that is neither, so a new one is classified when it is added. A pair whose hash matches a stored
``scored``/``skipped`` result copies it instead of calling the judge: same
score and reason, ``passed`` decided by the current threshold, no tokens, no
cost, and ``details.reused_from`` naming the trace it was copied from. The
stored hash is indexed (``eval_results_content_hash_idx``, partial on done
rows), so the look-up is an index probe, one query per batch.

Within a run, identical pairs are coalesced before any result is stored: the
first one to start judges (the *leader*), later ones wait for its result
(:class:`InFlight`). A leader that fails hands nothing on: each follower then
judges for itself, as it would have without reuse. Re-scoring (a backfill with
``--rescore``) only reuses results written by the re-scoring run itself.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from concurrent.futures import Future
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from judgeflow.db.engine import engine_for
from judgeflow.errors import DatabaseError
from judgeflow.config.judge_models import metric_judge_model
from judgeflow.config.settings import Settings
from judgeflow.metrics.registry import spec_of
from judgeflow.model import TraceWork

# The predicate of the partial index, written out so the planner matches it.
_LOOKUP = text(
    """
    SELECT DISTINCT ON (content_hash) content_hash, trace_id, status, score, reason, details,
           metric_version, judge_model
    FROM judgeflow.eval_results
    WHERE content_hash = ANY(CAST(:hashes AS text[])) AND status IN ('scored', 'skipped')
      AND (CAST(:rescore_before AS timestamptz) IS NULL OR scored_at >= CAST(:rescore_before AS timestamptz))
    -- an original before a copy, then the oldest: reused_from names the trace really judged
    ORDER BY content_hash, (details ? 'reused_from'), scored_at
    """
)


# Settings a stored score depends on: each is in the content hash. A metric's own are
# its settings model's ``score_fields`` (judgeflow/metrics/registry.py), hashed with its pairs only.
SCORE_SETTINGS = frozenset({"judge_model", "judge_api_base", "include_reason", "max_field_chars", "session_max_chars"})
# Settings that never change a score or its reason (how calls are made,
# retried, paid for, bounded; where data lives; alerting; thresholds, which
# decide ``passed`` afresh on every copy): left out of the hash on purpose.
SCORE_NEUTRAL_SETTINGS = frozenset({
    "judge_api_key",  # the account, not the judge: the endpoint and model are hashed
    # `judgeflow shadow`'s candidate endpoint (its runs hash the candidate's judge_api_base) and where a
    # key may go over plain http
    "shadow_judge_api_base", "shadow_judge_api_key", "plain_http_key_hosts",
    "judge_timeout_s", "judge_max_retries", "judge_backoff_base_s", "judge_backoff_max_s",
    "judge_max_repairs",  # re-asks for a valid reply: decides failed vs scored, not the score
    "max_concurrency", "judge_processes",
    "judge_input_cost_per_mtok", "judge_output_cost_per_mtok", "run_budget_usd", "settle_delay", "reuse_identical",
    "judge_cached_input_cost_per_mtok",
    # the same calls through the provider's batch API, and their price: the same replies
    "judge_batch", "judge_batch_discount", "judge_batch_window", "judge_batch_poll_s", "judge_batch_poll_max_s",
    "judge_batch_settle_s", "judge_batch_max_lines", "judge_batch_max_mb",
    "judge_batch_line_retry",  # where a line the batch failed is asked again: the same request either way
    "judge_rpm", "judge_tpm",  # the account's rate limit: when a call goes, not what it asks
    "judge_account",  # whose rate limit: when a call goes, not what it asks
    "sample_budget_usd", "sample_late_reserve", "stratify_by",  # which traces are judged, not how one is scored
    "database_url", "source_database_url", "traces_table", "source_lookback", "home", "lease_timeout_s",
    "embedded_database",  # which database of the embedded cluster holds the results, not how one is scored
    "pool_mode",  # how claims are held between judgeflow and PostgreSQL
    # which source and where: what a preset maps a row to (input, output, context) is hashed as content
    "source", "source_schema", "phoenix_write_back", "phoenix_url", "phoenix_api_key",
    "task_retries", "task_retry_delay_s", "max_runs_per_pair", "max_run_duration", "schedule_timezone",
    "failure_rate_max", "dead_delivery_rate_max",
    "metric_settings",  # each metric's own: its score_fields are hashed, the rest only decide passed or alert
    "phoenix_unwritten_max_age",  # an alert rule's age on the write-back, not a score
    "metrics_file",  # which metrics are served: each one's prompts are in its metric version, hashed
    "session_key", "session_idle",  # which traces make a session and when it is judged: its turns are hashed
})
# whole groups that only alert on stored scores
SCORE_NEUTRAL_PREFIXES = ("alert_", "regression_")


def _secret_digest(value) -> str | None:
    """A digest of a secret's real value (a SecretStr prints as '**********'):
    the hash tells endpoints apart without holding their URL or credentials."""
    if value is None:
        return None
    raw = value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def content_hash(work: TraceWork, settings: Settings, metric_version: str) -> str | None:
    """The pair's content hash; None when it cannot be reused (no output: it fails anyway)."""
    if work.output is None:
        return None
    key = {
        "metric": work.metric,
        "metric_version": metric_version,
        "judge_model": metric_judge_model(settings.judge_model, spec_of(work.metric).judge_model),
        "judge_api_base": _secret_digest(settings.judge_api_base),
        **settings.metric(work.metric).content_key(),
        "include_reason": settings.include_reason,
        "max_field_chars": settings.max_field_chars,
        # a session's conversation is fitted to this budget (a trace's hash stays as it was)
        **({"session_max_chars": settings.session_max_chars} if work.turns is not None else {}),
        "input": work.input or "",
        "output": work.output,
        "context": work.context,
    }
    encoded = json.dumps(key, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest()


def find_done(settings: Settings, hashes: list[str], *, rescore_before: datetime | None) -> dict[str, dict[str, Any]]:
    """Stored done results by content hash (one indexed query)."""
    if not hashes:
        return {}
    try:
        with engine_for(settings).connect() as conn:
            rows = conn.execute(
                _LOOKUP, {"hashes": sorted(set(hashes)), "rescore_before": rescore_before}
            ).mappings().all()
    except DBAPIError as exc:
        raise DatabaseError(f"could not look up identical results: {type(exc.orig).__name__}: {exc.orig}") from None
    return {r["content_hash"]: dict(r) for r in rows}


class InFlight:
    """Per run, per content hash: the future of the first pair judging it.

    Shared by the pair tasks (threads) and the batch coroutines (the judge
    loop), so it holds ``concurrent.futures.Future`` objects. A finished entry
    stays (bounded, oldest dropped first) so a pair that starts after its twin
    finished but before the twin's row is written still reuses it."""

    MAX_ENTRIES = 50_000  # a bound for a run that never ends; forget() empties a run's entries

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], Future] = OrderedDict()

    def lead_or_follow(self, run: str, digest: str) -> tuple[bool, Future]:
        """(True, a new future to finish) for the first pair, else (False, the leader's future)."""
        key = (run, digest)
        with self._lock:
            existing = self._entries.get(key)
            if existing is not None:
                return False, existing
            future: Future = Future()
            self._entries[key] = future
            while len(self._entries) > self.MAX_ENTRIES:
                self._entries.popitem(last=False)
            return True, future

    def finish(self, run: str, digest: str, future: Future, source: dict[str, Any] | None) -> None:
        """The leader's outcome: a reusable result, or None (it failed: followers judge for themselves)."""
        if source is None:
            with self._lock:
                if self._entries.get((run, digest)) is future:
                    del self._entries[(run, digest)]
        if not future.done():
            future.set_result(source)


    def forget(self, run: str) -> None:
        """The run is over: its entries are dropped (``judgeflow serve`` lives for months)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == run]:
                del self._entries[key]


in_flight = InFlight()


def reusable(row: dict[str, Any]) -> dict[str, Any] | None:
    """What a stored or just-built result row offers to identical pairs."""
    if row.get("status") not in ("scored", "skipped"):
        return None
    return {k: row.get(k) for k in ("trace_id", "status", "score", "reason", "details", "metric_version",
                                    "judge_model")}


def copied_row(work: TraceWork, source: dict[str, Any], *, threshold: float, flow_run_id: str | None,
               digest: str) -> dict[str, Any]:
    """The result row of ``work`` copied from ``source``: no judge call, no cost."""
    details = dict(source.get("details") or {})
    # a copy of a copy names the trace really judged: a batch can store its copies
    # before the batch that judged the original stores it, and a later look-up
    # then finds only a copy (tests/flows/test_spend_controls.py)
    details.setdefault("reused_from", source["trace_id"])
    if work.turns is not None:  # a session's row says how many turns it stands for
        details["turns"] = work.turns
    score = source["score"]
    scored = source["status"] == "scored" and score is not None
    passed = spec_of(work.metric).passes(score, threshold) if scored else None
    return {
        "trace_id": work.trace_id, "metric": work.metric, "metric_version": source["metric_version"],
        "status": source["status"], "score": score, "passed": passed,
        "threshold": threshold, "reason": source["reason"], "details": details,
        "judge_model": source["judge_model"], "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0,
        "latency_ms": 0.0, "judge_calls": 0, "error": None, "error_kind": None, "attempts": 1,
        "flow_run_id": flow_run_id, "trace_created_at": work.created_at, "content_hash": digest,
    }
