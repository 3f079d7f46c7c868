"""Conversations (docs/metrics.md, "Conversations"): finding the sessions that went quiet, claiming
their (session, metric) pairs with their conversation, and marking them judged.

Finding runs every scoring run, whether or not a session metric is served: the session rates of
the trace metrics (tasks/session_rates.py) need the same quiet sessions. What it reads of the
source is the traces new since its last scan (minus ``JUDGEFLOW_SOURCE_LOOKBACK``), never the
history; what it reads of judgeflow's tables is the sessions that changed (judgeflow/db/sessions.py).
"""

from __future__ import annotations

import logging
from datetime import date, timedelta

from prefect import task
from prefect.cache_policies import NO_CACHE
from sqlalchemy.exc import DBAPIError

from judgeflow.config.settings import Settings
from judgeflow.db import sessions as db
from judgeflow.db.engine import engine_for, source_engine
from judgeflow.errors import DatabaseError
from judgeflow.model import ClaimedBatch, Cursor, TraceWork
from judgeflow.run.budget import RunBudget
from judgeflow.sampling import decisions
from judgeflow.sampling import sessions as sampling
from judgeflow.sources.identity import result_source
from judgeflow.sources.trace_source import KeyFilter, read_session_rows, trace_source

log = logging.getLogger("judgeflow.sessions")

# source rows read per page while recording turns
SCAN_PAGE = 5_000


def record_new_turns(settings: Settings) -> int:
    """Record the turns of the source's traces since its last scan (minus the look-back); how many
    rows were read. The scan's end moves only once its turns are stored."""
    source, identity = trace_source(settings), result_source(settings)
    engine = engine_for(settings)
    with engine.connect() as conn:
        last = db.scanned_to(conn, identity)
    lo = None if last is None else last - timedelta(seconds=settings.source_lookback_s)
    after, read, newest, unreadable = None, 0, None, 0
    while True:
        page = read_session_rows(source, source_engine(settings), KeyFilter(lo=lo, after=after),
                                 settings.session_key, SCAN_PAGE)
        if page.rows:
            with engine.begin() as conn:
                db.record_turns(conn, identity, page.rows)
            read += len(page.rows)
        unreadable += len(page.unreadable)
        if page.last is not None:
            after, newest = page.last, page.last[0]
        if not page.full:
            break
    if unreadable:
        log.warning("%d source row(s) whose session value could not be read joined no session "
                    "(each is failed as invalid_trace when scored)", unreadable)
    if newest is not None:
        with engine.begin() as conn:
            db.set_scanned_to(conn, identity, newest)
    return read


# retries: the task level, for the database (recording turns is idempotent: a turn is inserted once)
@task(name="find-quiet-sessions", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def find_quiet_sessions(settings: Settings) -> list[db.QuietSession]:
    """Record the new turns, then the sessions that went quiet (``JUDGEFLOW_SESSION_IDLE``) with
    turns no judging saw: the sessions this run judges and marks (their ``session_id``, turns, last
    turn time), oldest first."""
    try:
        read = record_new_turns(settings)
        with engine_for(settings).connect() as conn:
            quiet = db.quiet_sessions(conn, result_source(settings), settings.session_idle_s)
    except DBAPIError as exc:
        raise DatabaseError(f"could not find the quiet sessions: {type(exc.orig).__name__}: {exc.orig}") from None
    log.info("%d trace(s) with a session read; %d session(s) quiet and changed", read, len(quiet))
    return quiet


def _conversations(settings: Settings, session_ids: list[str]) -> dict[str, list[dict]]:
    with engine_for(settings).connect() as conn:
        return db.conversations(conn, trace_source(settings), source_engine(settings), session_ids)


# retries: the task level, for the database (deciding is one transaction; a decision made stands on a retry)
@task(name="sample-quiet-sessions", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def sample_quiet_sessions(settings: Settings, sessions: list[db.QuietSession], metrics: list[str], *,
                          budget: RunBudget | None, night: date | None, flow_run_id: str | None
                          ) -> list[db.QuietSession]:
    """The quiet sessions this run judges. Under a sample budget (``night``, ``budget``: the run's one
    budget, once the night's traces are judged) a sample of the sessions not decided yet for their
    turns, as many as fit what ``budget`` has left (judgeflow/sampling/sessions.py), with those an
    earlier run selected and left unjudged; else all of them. A grown session's earlier decision
    is dropped either way: its new result is not weighed by the turns it had."""
    ids = [s.session_id for s in sessions]
    try:
        with engine_for(settings).begin() as conn:
            prior = decisions.decided(conn, ids)
            current = {s.session_id for s in sessions if prior.get(s.session_id, (None,))[0] == s.last_turn_at}
            if budget is None or night is None:
                decisions.forget(conn, [i for i in prior if i not in current])
                return list(sessions)
            # decided for these turns by an earlier run: a selected one is judged, one left out stays out
            db.decide_out(conn, [s for s in sessions if s.session_id in current and not prior[s.session_id][1]])
            new = [s for s in sessions if s.session_id not in current]
            costs = _costs(settings, new, metrics, budget)
            chosen = set(i.session_id for i in sampling.decide(conn, night, new, costs, budget.left_usd(), flow_run_id)
                         ) if new else set()
    except DBAPIError as exc:
        raise DatabaseError(f"could not sample the quiet sessions: {type(exc.orig).__name__}: {exc.orig}") from None
    judged = [s for s in sessions if s.session_id in chosen or (s.session_id in current and prior[s.session_id][1])]
    log.info("sample budget: judging %d of %d quiet session(s)", len(judged), len(sessions))
    return judged


def _costs(settings: Settings, sessions: list[db.QuietSession], metrics: list[str], budget: RunBudget
           ) -> dict[str, float]:
    """Each session's estimated cost: every session metric over its whole conversation, as the budget counts it."""
    conversations = _conversations(settings, [s.session_id for s in sessions])
    return {s.session_id: sum(budget.estimate(TraceWork(trace_id=s.session_id, metric=m, created_at=s.last_turn_at,
                                                        input="", output="", context=conversations[s.session_id],
                                                        turns=s.turns))[1] for m in metrics)
            for s in sessions}


# retries: the task level, for the database (a claim is one statement: a failed one claimed nothing)
@task(name="claim-sessions", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=[2, 5])
def claim_sessions(settings: Settings, owner: str, sessions: list[db.QuietSession], metrics: list[str], room: int,
                   cursor: Cursor | None, owner_key: int | None = None) -> ClaimedBatch:
    """Claim the pending (session, metric) pairs of the quiet sessions after ``cursor`` (at most
    ``room`` pairs' worth of sessions) with their conversation; the cursor None once all are read."""
    start = 0
    if cursor is not None:
        start = next((i + 1 for i, s in enumerate(sessions) if s.session_id == cursor.trace_id), len(sessions))
    per = max(1, room // max(len(metrics), 1))
    pairs: list = []
    try:
        while start < len(sessions):
            page = sessions[start:start + per]
            start += len(page)
            with engine_for(settings).connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                pairs = db.claim_session_pairs(conn, page, metrics, owner=owner, owner_key=owner_key,
                                               lease_s=settings.lease_timeout_s,
                                               max_failed_runs=settings.max_runs_per_pair)
            if pairs:
                break
    except DBAPIError as exc:
        raise DatabaseError(f"could not claim sessions: {type(exc.orig).__name__}: {exc.orig}") from None
    if not pairs:
        return ClaimedBatch(items=[], cursor=None)
    conversations = _conversations(settings, list(dict.fromkeys(s.session_id for s, _ in pairs)))
    items = [TraceWork(trace_id=s.session_id, metric=metric, created_at=s.last_turn_at, input="", output="",
                       context=conversations[s.session_id], turns=s.turns) for s, metric in pairs]
    last = sessions[start - 1]
    return ClaimedBatch(items=items, cursor=Cursor(created_at=last.last_turn_at, trace_id=last.session_id,
                                                   phase="sessions"))


# retries: the task level, for the database (marking is one idempotent statement)
@task(name="mark-sessions-judged", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def mark_sessions_judged(settings: Settings, sessions: list[db.QuietSession], metrics: list[str]) -> list[str]:
    """Mark judged the quiet sessions whose every session-metric pair now has a result that saw their
    turns (all of them when no session metric is served); the ids marked. A session left with a pair
    to judge (a stop, the budget) or that grew meanwhile stays due for the next run."""
    try:
        with engine_for(settings).begin() as conn:
            return db.mark_judged(conn, sessions, metrics, max_failed_runs=settings.max_runs_per_pair)
    except DBAPIError as exc:
        raise DatabaseError(f"could not mark sessions judged: {type(exc.orig).__name__}: {exc.orig}") from None
