"""The Phoenix write-back as an outbox: every scored result of a Phoenix source that
Phoenix does not have yet is written by the next run, or at once by
`judgeflow phoenix sync`. Nothing is judged again.

The state lives on the result (migration 11_result_sources.py): a scored result of a ``phoenix:``
source is **unwritten** while ``written_back_at`` is NULL or older than
``scored_at`` (a re-score makes it unwritten again). So results scored before the
write-back was turned on, or whose write failed, or written while Phoenix was down,
are all simply unwritten, found through a partial index
(``eval_results_unwritten_idx``).

Each write that fails records ``write_back_error``, counts ``write_back_tries`` and
pushes ``write_back_next_at`` back exponentially (:data:`BACKOFF_S` doubling up to
:data:`BACKOFF_MAX_S`); a run writes only what is due, `phoenix sync` everything
unwritten. A result whose span Phoenix names as one it does not hold is given up
after :data:`GIVE_UP_AFTER` such refusals (``write_back_next_at`` ``infinity``):
runs no longer try it, `phoenix sync` does. A refusal of the whole request (the
key: HTTP 401/403; a URL that is not Phoenix's API: 404/405 naming no span) or an
unreachable Phoenix stops the write-back at once with one note naming Phoenix's
scheme, host and port only: no result counts a try for it, and every unwritten
result of the source records it as its last error, so `status`, `show` and the
``phoenix_unwritten`` alert rule keep saying so until a write succeeds. A result
is marked written only if it was not re-scored meanwhile (its ``scored_at`` is
unchanged).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, text

from judgeflow.phoenix.annotations import phoenix_client, post_annotations

BACKOFF_S = 60.0
BACKOFF_MAX_S = 6 * 3600.0
GIVE_UP_AFTER = 8
PAGE = 500

# keep in step with the predicate of eval_results_unwritten_idx (migration 11_result_sources.py)
UNWRITTEN = ("status = 'scored' AND source LIKE 'phoenix:%' "
             "AND (written_back_at IS NULL OR written_back_at < scored_at)")

_DUE = text(
    f"""
    SELECT trace_id, metric, score, passed, reason, threshold, judge_model, metric_version, flow_run_id,
           scored_at, write_back_tries
    FROM judgeflow.eval_results
    WHERE {UNWRITTEN} AND source = :source AND (trace_id, metric) > (:after_id, :after_metric)
      AND (:everything OR write_back_next_at IS NULL OR write_back_next_at <= now())
    ORDER BY trace_id, metric LIMIT :page
    """
)
_WRITTEN = text(
    """
    UPDATE judgeflow.eval_results r
    SET written_back_at = greatest(now(), r.scored_at), write_back_error = NULL, write_back_next_at = NULL,
        write_back_tries = 0
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS x(trace_id text, metric text, scored_at timestamptz)
    WHERE r.trace_id = x.trace_id AND r.metric = x.metric AND r.scored_at = x.scored_at
    """
)
_FAILED = text(
    """
    UPDATE judgeflow.eval_results r
    SET write_back_error = x.error, write_back_tries = r.write_back_tries + 1,
        write_back_next_at = CASE
            WHEN x.refused AND r.write_back_tries + 1 >= :give_up THEN 'infinity'::timestamptz
            ELSE now() + make_interval(secs => least(:max_s, :base_s * power(2, least(r.write_back_tries, 30)))) END
    FROM jsonb_to_recordset(CAST(:rows AS jsonb))
         AS x(trace_id text, metric text, scored_at timestamptz, error text, refused boolean)
    WHERE r.trace_id = x.trace_id AND r.metric = x.metric AND r.scored_at = x.scored_at
    """
)
_COUNTS = text(
    f"""
    SELECT count(*), count(*) FILTER (WHERE write_back_next_at = 'infinity'),
           count(*) FILTER (WHERE write_back_next_at > now() AND write_back_next_at < 'infinity'),
           mode() WITHIN GROUP (ORDER BY write_back_error) FILTER (WHERE write_back_error IS NOT NULL),
           min(scored_at)
    FROM judgeflow.eval_results WHERE {UNWRITTEN} AND source = :source
    """
)
# a stop (a refused request, Phoenix unreachable) is every waiting result's last error
_STOPPED = text(
    f"""
    UPDATE judgeflow.eval_results SET write_back_error = :error
    WHERE {UNWRITTEN} AND source = :source AND write_back_next_at IS DISTINCT FROM 'infinity'
      AND write_back_error IS DISTINCT FROM :error
    """
)
# both through eval_results_unwritten_idx (source, scored_at)
_STALE = text(
    f"""
    SELECT count(*) FILTER (WHERE write_back_error IS NOT NULL AND scored_at < :stale_before), count(*)
    FROM judgeflow.eval_results WHERE {UNWRITTEN} AND source = :source
    """
)


@dataclass
class Sync:
    """What one write-back pass did."""

    written: int = 0
    failed: int = 0  # tried and not written: retried later
    given_up: int = 0  # given up in this pass (GIVE_UP_AFTER refusals naming their span)
    stop: str | None = None
    auth_refused: bool = False
    request_refused: bool = False
    errors: list[str] = field(default_factory=list)
    left: int = 0  # still unwritten after this pass
    left_given_up: int = 0  # of ``left``, given up: runs no longer try them, `phoenix sync` does

    @property
    def note(self) -> str:
        text_ = f"Phoenix write-back: {self.written} score(s) written as span annotations"
        if self.failed:
            text_ += f", {self.failed} not ({'; '.join(self.errors[:3])})"
        if self.stop:
            text_ += f"; stopped: {self.stop}"
        waiting = self.left - self.left_given_up
        if waiting:
            text_ += (f"; {waiting} score(s) wait unwritten (the next run retries those due, "
                      "`judgeflow phoenix sync` all of them now)")
        if self.left_given_up:
            text_ += (f"; {self.left_given_up} score(s) given up after Phoenix refused their span "
                      f"{GIVE_UP_AFTER} times: runs no longer try them, `judgeflow phoenix sync` does")
        return text_ + "; the results table has them all"


def unwritten_counts(conn: Connection, source: str) -> dict:
    """Scored results of ``source`` Phoenix does not have yet: all of them, those
    given up, those waiting for their next try; the last write-back error among
    them (the most common: a stop sets it on all) and when the oldest was scored."""
    total, given_up, waiting, error, oldest = conn.execute(_COUNTS, {"source": source}).one()
    return {"unwritten": int(total), "given_up": int(given_up), "waiting": int(waiting), "last_error": error,
            "oldest_scored_at": None if oldest is None else oldest.isoformat()}


def stale_unwritten_counts(conn: Connection, source: str | None, *, stale_before) -> tuple[int, int]:
    """(stale, unwritten): ``source``'s unwritten results, and of them those a write
    failed for that were scored before ``stale_before``."""
    stale, unwritten = conn.execute(_STALE, {"source": source, "stale_before": stale_before}).one()
    return int(stale), int(unwritten)


def sync_phoenix(engine: Engine, source: str, base_url: str, api_key: str | None, *, everything: bool = False,
                 backoff_s: float = BACKOFF_S, backoff_max_s: float = BACKOFF_MAX_S) -> Sync:
    """Write ``source``'s unwritten results to Phoenix: those due (a run), or all of
    them (``everything``: `judgeflow phoenix sync`). Page by page, each page's
    outcome committed before the next is read."""
    out = Sync()
    after = ("", "")
    with phoenix_client(base_url, api_key) as client:
        while out.stop is None:
            with engine.connect() as conn:
                rows = [dict(r) for r in conn.execute(_DUE, {
                    "source": source, "after_id": after[0], "after_metric": after[1], "everything": everything,
                    "page": PAGE}).mappings()]
            if not rows:
                break
            after = (rows[-1]["trace_id"], rows[-1]["metric"])
            posted = post_annotations(client, rows)
            _record(engine, rows, posted, out, backoff_s=backoff_s, backoff_max_s=backoff_max_s)
    with engine.begin() as conn:
        if out.stop:
            conn.execute(_STOPPED, {"source": source, "error": out.stop})
        counts = unwritten_counts(conn, source)
    out.left, out.left_given_up = counts["unwritten"], counts["given_up"]
    return out


def _record(engine: Engine, rows: list[dict], posted, out: Sync, *, backoff_s: float, backoff_max_s: float) -> None:
    def key(i: int, **extra) -> dict:
        return {"trace_id": rows[i]["trace_id"], "metric": rows[i]["metric"],
                "scored_at": rows[i]["scored_at"].isoformat(), **extra}

    failed = [key(i, error=e, refused=False) for i, e in posted.failed.items()]
    failed += [key(i, error=e, refused=True) for i, e in posted.refused.items()]
    with engine.begin() as conn:
        if posted.written:
            conn.execute(_WRITTEN, {"rows": json.dumps([key(i) for i in posted.written])})
        if failed:
            conn.execute(_FAILED, {"rows": json.dumps(failed), "give_up": GIVE_UP_AFTER,
                                   "base_s": backoff_s, "max_s": backoff_max_s})
    out.written += len(posted.written)
    out.failed += len(failed)
    out.given_up += sum(1 for i in posted.refused if rows[i]["write_back_tries"] + 1 >= GIVE_UP_AFTER)
    out.errors = list(dict.fromkeys([*out.errors, *posted.refused.values(), *posted.failed.values()]))[:10]
    out.stop = out.stop or posted.stop
    out.auth_refused = out.auth_refused or posted.auth_refused
    out.request_refused = out.request_refused or posted.request_refused
