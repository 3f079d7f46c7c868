"""The judge's batches on record (``judgeflow.judge_batches`` and ``judge_batch_lines``,
migration 19_judge_batches.py): what a run sent through the provider's batch API, so
that nothing is paid twice.

A batch is recorded, with each of its lines (pair, step, ``custom_id``), in its own
transaction before it is created: under its token, status ``creating`` (its intent), the
provider's id put in its place once the creation returned (:func:`adopt_batch`), in one
transaction, before the run waits on it. An intent left ``creating`` (its run killed
between the two, or the creation's reply lost) is found at the provider by its token,
which the batch carries in its metadata, and adopted; or dropped (:func:`drop_intent`)
when the provider has no such batch (the creation never happened): nothing created is
left unknown, nothing sent twice. A batch is **alive** while its status is not
one of :data:`DEAD` and it is younger than the provider's completion window
(``JUDGEFLOW_JUDGE_BATCH_WINDOW``): its lines are answered, or will be, and a run that
asks the same line (the same ``custom_id``) waits on that batch instead of submitting
it again. A batch that completed stays alive: its output is still there to collect
(a run killed after the provider finished). A line whose answer a run handed to its
pair is **collected**: it no longer holds anything (a later run asking the same
request, a re-score, asks it anew). A pair whose uncollected line is in a live batch
is left to a batch run (:func:`held_by_batch_sql`, in the claims' definition of
pending); a dead batch frees its pairs.

A line the provider failed that the run asked again online has no output file to be
read from again: its answer is recorded (``judgeflow.judge_online_answers``, migration
21_online_answers.py, :func:`record_online_answer`) as soon as it came, under the failed
line's ``custom_id``, and a later run asking that line gets it from there
(``LineOnRecord.answered_online``) while its pair stored no result since, within the
window, as a batch's answer is read again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import text

from judgeflow.config.settings import Settings
from judgeflow.db.engine import engine_for
from judgeflow.db.schema import SCHEMA
from judgeflow.judge.base import JudgeReply
from judgeflow.judge.batch_lines import CREATING, DEAD, ENDED, SUBMITTED, BatchLine, LineOnRecord


_LIVE = "b.status <> ALL(CAST(:dead AS text[])) AND b.created_at > now() - make_interval(secs => :window_s)"


@dataclass(frozen=True)
class BatchRecord:
    batch_id: str
    provider: str
    model: str
    round: int
    owner: str
    status: str
    expires_at: datetime


@dataclass(frozen=True)
class BatchOut:
    """A live batch that has not ended, for ``judgeflow status``."""

    batch_id: str
    model: str
    round: int
    status: str
    lines: int
    age_s: float


def held_by_batch_sql(pair_trace: str, pair_metric: str) -> str:
    """SQL: the pair (``pair_trace``, ``pair_metric``) has a line in a live batch
    (parameters ``:dead`` and ``:window_s``: :func:`live_params`)."""
    return (f"EXISTS (SELECT 1 FROM {SCHEMA}.judge_batch_lines l JOIN {SCHEMA}.judge_batches b "
            f"ON b.batch_id = l.batch_id WHERE l.trace_id = {pair_trace} AND l.metric = {pair_metric} "
            f"AND l.collected_at IS NULL AND {_LIVE})")


def live_params(settings: Settings) -> dict:
    """The parameters of :func:`held_by_batch_sql` and the other questions of liveness."""
    return {"dead": list(DEAD), "window_s": settings.judge_batch_window_s}


# collected (its answer is in the batch's output file: a completed batch's, or the part a cancelled or
# expired one answered) within the window, and its pair stored no result since
_ANSWERED = ("l.collected_at IS NOT NULL AND b.status <> 'lost' "
             "AND b.created_at > now() - make_interval(secs => :window_s) AND NOT EXISTS ("
             f"SELECT 1 FROM {SCHEMA}.eval_results r WHERE r.trace_id = l.trace_id AND r.metric = l.metric "
             "AND r.scored_at >= l.collected_at)")


# answered online within the window, and its pair stored no result since
_ONLINE_KEPT = ("a.answered_at > now() - make_interval(secs => :window_s) AND NOT EXISTS ("
                f"SELECT 1 FROM {SCHEMA}.eval_results r WHERE r.trace_id = a.trace_id AND r.metric = a.metric "
                "AND r.scored_at >= a.answered_at)")
_REPLY_FIELDS = ("content", "model", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd", "calls")


def record_batch(settings: Settings, batch: BatchRecord, lines: list[BatchLine]) -> None:
    """The batch and its lines, in one transaction: on record before anyone waits on it."""
    with engine_for(settings).begin() as conn:
        conn.execute(text(
            f"INSERT INTO {SCHEMA}.judge_batches (batch_id, provider, model, round, owner, status, lines, expires_at) "
            "VALUES (:batch_id, :provider, :model, :round, :owner, :status, :lines, :expires_at)"
        ), {**batch.__dict__, "lines": len(lines)})
        conn.execute(text(
            f"INSERT INTO {SCHEMA}.judge_batch_lines (batch_id, custom_id, trace_id, metric, step) "
            "VALUES (:batch_id, :custom_id, :trace_id, :metric, :step) ON CONFLICT DO NOTHING"
        ), [{"batch_id": batch.batch_id, **line.__dict__} for line in lines])


def adopt_batch(settings: Settings, token: str, batch_id: str) -> None:
    """The intent ``token`` is batch ``batch_id`` (its lines move to it), status ``submitted``."""
    with engine_for(settings).begin() as conn:
        conn.execute(text(
            f"INSERT INTO {SCHEMA}.judge_batches "
            "(batch_id, provider, model, round, owner, status, lines, expires_at, created_at) "
            "SELECT :b, provider, model, round, owner, :status, lines, expires_at, created_at "
            f"FROM {SCHEMA}.judge_batches WHERE batch_id = :t ON CONFLICT (batch_id) DO NOTHING"
        ), {"b": batch_id, "t": token, "status": SUBMITTED})
        conn.execute(text(
            f"INSERT INTO {SCHEMA}.judge_batch_lines (batch_id, custom_id, trace_id, metric, step) "
            f"SELECT :b, custom_id, trace_id, metric, step FROM {SCHEMA}.judge_batch_lines WHERE batch_id = :t "
            "ON CONFLICT DO NOTHING"
        ), {"b": batch_id, "t": token})
        conn.execute(text(f"DELETE FROM {SCHEMA}.judge_batches WHERE batch_id = :t"), {"t": token})


def drop_intent(settings: Settings, token: str) -> None:
    """The intent ``token`` goes with its lines: the provider has no batch of it (never created)."""
    with engine_for(settings).begin() as conn:
        conn.execute(text(f"DELETE FROM {SCHEMA}.judge_batches WHERE batch_id = :t AND status = :creating"),
                     {"t": token, "creating": CREATING})


def lines_on_record(settings: Settings, custom_ids: list[str]) -> dict[str, LineOnRecord]:
    """What the record says of each of ``custom_ids`` it knows (the newest live batch first; the
    newest completed batch whose answer is still the pair's: the module doc)."""
    if not custom_ids:
        return {}
    with engine_for(settings).connect() as conn:
        rows = conn.execute(text(
            f"SELECT l.custom_id, "
            f"  (array_agg(b.batch_id ORDER BY b.created_at DESC) "
            f"   FILTER (WHERE l.collected_at IS NULL AND {_LIVE}))[1] AS live, "
            f"  (array_agg(b.batch_id ORDER BY b.created_at DESC) FILTER (WHERE {_ANSWERED}))[1] AS answered, "
            "   count(*) FILTER (WHERE b.status = ANY(CAST(:dead AS text[]))) AS dead, "
            "   (array_agg(b.status ORDER BY b.created_at DESC) "
            "    FILTER (WHERE b.status = ANY(CAST(:dead AS text[]))))[1] AS dead_status "
            f"FROM {SCHEMA}.judge_batch_lines l JOIN {SCHEMA}.judge_batches b ON b.batch_id = l.batch_id "
            "WHERE l.custom_id = ANY(CAST(:ids AS text[])) GROUP BY l.custom_id"
        ), {"ids": list(custom_ids), **live_params(settings)}).all()
        online = conn.execute(text(
            f"SELECT a.custom_id, {', '.join('a.' + f for f in _REPLY_FIELDS)} "
            f"FROM {SCHEMA}.judge_online_answers a WHERE a.custom_id = ANY(CAST(:ids AS text[])) AND {_ONLINE_KEPT}"
        ), {"ids": list(custom_ids), "window_s": settings.judge_batch_window_s}).all()
    found = {cid: LineOnRecord(live, int(dead), dead_status, answered)
             for cid, live, answered, dead, dead_status in rows}
    for cid, *reply in online:
        found[cid] = replace(found.get(cid, LineOnRecord(None, 0)),
                             answered_online=JudgeReply(**dict(zip(_REPLY_FIELDS, reply))))
    return found


def record_online_answer(settings: Settings, line: BatchLine, reply: JudgeReply) -> None:
    """``reply``, the online answer to ``line`` (a batch line the provider failed), on record (the module
    doc); the answers older than the window, which nobody reads any more, go."""
    with engine_for(settings).begin() as conn:
        conn.execute(text(f"DELETE FROM {SCHEMA}.judge_online_answers "
                          "WHERE answered_at <= now() - make_interval(secs => :window_s)"),
                     {"window_s": settings.judge_batch_window_s})
        conn.execute(text(
            f"INSERT INTO {SCHEMA}.judge_online_answers "
            f"(custom_id, trace_id, metric, step, {', '.join(_REPLY_FIELDS)}) "
            f"VALUES (:custom_id, :trace_id, :metric, :step, {', '.join(':' + f for f in _REPLY_FIELDS)}) "
            "ON CONFLICT (custom_id) DO UPDATE SET "
            + ", ".join(f"{f} = EXCLUDED.{f}" for f in ("trace_id", "metric", "step", *_REPLY_FIELDS))
            + ", answered_at = now()"
        ), {**line.__dict__, **{f: getattr(reply, f) for f in _REPLY_FIELDS}})


def mark_collected(settings: Settings, batch_id: str, custom_ids: list[str]) -> None:
    """The lines of ``batch_id`` whose answers a run handed to their pairs."""
    if not custom_ids:
        return
    with engine_for(settings).begin() as conn:
        conn.execute(text(
            f"UPDATE {SCHEMA}.judge_batch_lines SET collected_at = now() "
            "WHERE batch_id = :b AND custom_id = ANY(CAST(:ids AS text[])) AND collected_at IS NULL"
        ), {"b": batch_id, "ids": list(custom_ids)})


def update_batch(settings: Settings, batch_id: str, status: str, completed: int, failed: int) -> None:
    """The provider's latest word on a batch (its end stamped once it ended)."""
    with engine_for(settings).begin() as conn:
        conn.execute(text(
            f"UPDATE {SCHEMA}.judge_batches SET status = :status, completed_lines = :completed, "
            "failed_lines = :failed, ended_at = CASE WHEN :status = ANY(CAST(:ended AS text[])) "
            "THEN COALESCE(ended_at, now()) END WHERE batch_id = :b"
        ), {"b": batch_id, "status": status, "completed": completed, "failed": failed, "ended": list(ENDED)})


def batches_out(settings: Settings) -> list[BatchOut]:
    """The live batches that have not ended, oldest first."""
    with engine_for(settings).connect() as conn:
        rows = conn.execute(text(
            f"SELECT b.batch_id, b.model, b.round, b.status, b.lines, "
            "       extract(epoch FROM now() - b.created_at) AS age_s "
            f"FROM {SCHEMA}.judge_batches b WHERE {_LIVE} AND b.status <> 'completed' ORDER BY b.created_at"
        ), live_params(settings)).all()
    return [BatchOut(r[0], r[1], int(r[2]), r[3], int(r[4]), float(r[5])) for r in rows]
