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
unwritten. A result whose span Phoenix names as one it does not hold (retention
deleted it, or a user) is final after :data:`GIVE_UP_AFTER` such refusals, each a
try (``write_back_next_at`` ``infinity``, its error "Phoenix no longer holds span
..."): no run and no `phoenix sync` tries it again, it is counted apart and not as
unwritten (``status``, the ``phoenix_unwritten`` rule), and only
`phoenix sync --repair` tries it once more. `phoenix sync --repair` also posts
again every result already written, as Phoenix may have lost the annotation (a user
deleted it): Phoenix keeps one per (name, span, identifier), so a post of one it
still holds changes nothing. A refusal of the whole request (the
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
# of those, final: Phoenix no longer holds their span (GIVE_UP_AFTER refusals naming it)
GONE = "write_back_next_at = 'infinity'"
NOT_GONE = "write_back_next_at IS DISTINCT FROM 'infinity'"

# a session's result (its trace_id a session result id) carries its session's key: Phoenix's session.id
_PAGE_OF = """
    SELECT p.*, s.session_key FROM (
        SELECT trace_id, metric, score, passed, reason, threshold, judge_model, metric_version, flow_run_id,
               scored_at, write_back_tries, details
        FROM judgeflow.eval_results
        WHERE {which} AND source = :source AND (trace_id, metric) > (:after_id, :after_metric)
        ORDER BY trace_id, metric LIMIT :page) p
    LEFT JOIN judgeflow.sessions s ON s.session_id = p.trace_id
    ORDER BY p.trace_id, p.metric
    """
_DUE = text(_PAGE_OF.format(which=f"""{UNWRITTEN} AND {NOT_GONE}
      AND (:everything OR write_back_next_at IS NULL OR write_back_next_at <= now())"""))
# `phoenix sync --repair`: every scored result, written, unwritten or final
_ALL = text(_PAGE_OF.format(which="status = 'scored'"))
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
        -- a refused span of a written result (a repair): unwritten again, its tries counting
        written_back_at = CASE WHEN x.refused THEN NULL ELSE r.written_back_at END,
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
    SELECT count(*) FILTER (WHERE {NOT_GONE}), count(*) FILTER (WHERE {GONE}),
           count(*) FILTER (WHERE write_back_next_at > now() AND {NOT_GONE}),
           mode() WITHIN GROUP (ORDER BY write_back_error) FILTER (WHERE write_back_error IS NOT NULL AND {NOT_GONE}),
           min(scored_at) FILTER (WHERE {NOT_GONE})
    FROM judgeflow.eval_results WHERE {UNWRITTEN} AND source = :source
    """
)
# a stop (a refused request, Phoenix unreachable) is every waiting result's last error
_STOPPED = text(
    f"""
    UPDATE judgeflow.eval_results SET write_back_error = :error
    WHERE {UNWRITTEN} AND source = :source AND {NOT_GONE} AND write_back_error IS DISTINCT FROM :error
    """
)
# both through eval_results_unwritten_idx (source, scored_at)
_STALE = text(
    f"""
    SELECT count(*) FILTER (WHERE write_back_error IS NOT NULL AND scored_at < :stale_before), count(*)
    FROM judgeflow.eval_results WHERE {UNWRITTEN} AND source = :source AND {NOT_GONE}
    """
)


@dataclass
class Sync:
    """What one write-back pass did."""

    written: int = 0
    failed: int = 0  # tried and not written: retried later
    gone: int = 0  # made final in this pass: Phoenix no longer holds their span (GIVE_UP_AFTER refusals)
    stop: str | None = None
    auth_refused: bool = False
    request_refused: bool = False
    errors: list[str] = field(default_factory=list)
    left: int = 0  # still unwritten after this pass, final ones apart
    left_gone: int = 0  # final: Phoenix no longer holds their span; not in ``left``

    @property
    def note(self) -> str:
        text_ = f"Phoenix write-back: {self.written} score(s) written as span annotations"
        if self.failed:
            text_ += f", {self.failed} not ({'; '.join(self.errors[:3])})"
        if self.stop:
            text_ += f"; stopped: {self.stop}"
        if self.left:
            text_ += (f"; {self.left} score(s) wait unwritten (the next run retries those due, "
                      "`judgeflow phoenix sync` all of them now)")
        if self.left_gone:
            text_ += (f"; {self.left_gone} score(s) not written for good: Phoenix no longer holds their span "
                      f"(refused {GIVE_UP_AFTER} tries; `judgeflow phoenix sync --repair` tries once more)")
        return text_ + "; the results table has them all"


def unwritten_counts(conn: Connection, source: str) -> dict:
    """Scored results of ``source`` Phoenix does not have yet: those still to write,
    those of them waiting for their next try, the last write-back error among them
    (the most common: a stop sets it on all) and when the oldest was scored; and
    apart, ``gone``: those final because Phoenix no longer holds their span."""
    total, gone, waiting, error, oldest = conn.execute(_COUNTS, {"source": source}).one()
    return {"unwritten": int(total), "gone": int(gone), "waiting": int(waiting), "last_error": error,
            "oldest_scored_at": None if oldest is None else oldest.isoformat()}


def stale_unwritten_counts(conn: Connection, source: str | None, *, stale_before) -> tuple[int, int]:
    """(stale, unwritten): ``source``'s unwritten results, and of them those a write
    failed for that were scored before ``stale_before``."""
    stale, unwritten = conn.execute(_STALE, {"source": source, "stale_before": stale_before}).one()
    return int(stale), int(unwritten)


def sync_phoenix(engine: Engine, source: str, base_url: str, api_key: str | None, *, everything: bool = False,
                 repair: bool = False, backoff_s: float = BACKOFF_S, backoff_max_s: float = BACKOFF_MAX_S) -> Sync:
    """Write ``source``'s unwritten results to Phoenix: those due (a run), or all of
    them (``everything``: `judgeflow phoenix sync`), or every scored result, written
    and final ones too (``repair``: `phoenix sync --repair`). Page by page, each
    page's outcome committed before the next is read."""
    out = Sync()
    after = ("", "")
    with phoenix_client(base_url, api_key) as client:
        while out.stop is None:
            with engine.connect() as conn:
                rows = [dict(r) for r in conn.execute(_ALL if repair else _DUE, {
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
    out.left, out.left_gone = counts["unwritten"], counts["gone"]
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
    out.gone += sum(1 for i in posted.refused if rows[i]["write_back_tries"] + 1 >= GIVE_UP_AFTER)
    out.errors = list(dict.fromkeys([*out.errors, *posted.refused.values(), *posted.failed.values()]))[:10]
    out.stop = out.stop or posted.stop
    out.auth_refused = out.auth_refused or posted.auth_refused
    out.request_refused = out.request_refused or posted.request_refused
