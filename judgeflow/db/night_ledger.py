"""A sharded night's shared ledger: the one spend budget and trace limit its
child flow runs hold together, keyed by the parent's flow run id (table
``judgeflow.night_ledger``, and ``judgeflow.night_traces`` for the traces the
night has taken; migration ``22_night_ledger.py``).

Each child's run budget (judgeflow/run/budget.py) charges here as it goes, one
statement per pair: a pair is reserved at its estimate only when the night's
spend plus every child's estimates in flight plus this one stay within the
budget (a conditional ``UPDATE``, atomic against the siblings), and what it
billed replaces its estimate when it ends. A child killed mid-pair leaves its
estimates in flight: the night counts them as spent, which they may well be.

The trace limit (``--limit``) is the night's: a trace counts once, whichever
child claimed which of its pairs; the parent's row is locked while a claim's
new traces are counted against it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy import Connection, Engine, bindparam, text

# a child reads the night's spend at most this stale before a pair's first call (judgeflow/run/budget.py)
FRESH_S = 0.25


@dataclass(frozen=True)
class NightLimits:
    """What the parent set for the whole night (None: no such limit): the
    spend budget, the trace limit, and under a sample budget the night it
    planned (``sample_night``, its ``sample_budget_usd``) and the oldest trace
    its plan selected (``reads_from``)."""

    budget_usd: float | None = None
    trace_limit: int | None = None
    sample_night: date | None = None
    sample_budget_usd: float | None = None
    reads_from: datetime | None = None


_COLUMNS = ("budget_usd", "trace_limit", "sample_night", "sample_budget_usd", "reads_from")


def open_night(conn: Connection, night_run_id: str, limits: NightLimits) -> None:
    """The parent enters its night before any child starts; a retried parent finds its row as it left it."""
    conn.execute(text(
        f"INSERT INTO judgeflow.night_ledger (night_run_id, {', '.join(_COLUMNS)}) "
        f"VALUES (:night_run_id, {', '.join(':' + c for c in _COLUMNS)}) ON CONFLICT (night_run_id) DO NOTHING"),
        {"night_run_id": night_run_id, **{c: getattr(limits, c) for c in _COLUMNS}})


def night_limits(conn: Connection, night_run_id: str) -> NightLimits | None:
    row = conn.execute(text(f"SELECT {', '.join(_COLUMNS)} FROM judgeflow.night_ledger WHERE night_run_id = :n"),
                       {"n": night_run_id}).one_or_none()
    return None if row is None else NightLimits(*row)


def night_spend(conn: Connection, night_run_id: str) -> tuple[float, float]:
    """The night's (spent, estimated in flight), over every child."""
    row = conn.execute(text("SELECT spent_usd, in_flight_usd FROM judgeflow.night_ledger WHERE night_run_id = :n"),
                       {"n": night_run_id}).one()
    return float(row[0]), float(row[1])


_RESERVE = text(
    "UPDATE judgeflow.night_ledger SET in_flight_usd = in_flight_usd + :u "
    "WHERE night_run_id = :n AND spent_usd + in_flight_usd + :u <= budget_usd RETURNING spent_usd, in_flight_usd")
_SETTLE = text(
    "UPDATE judgeflow.night_ledger SET spent_usd = spent_usd + :s, in_flight_usd = greatest(in_flight_usd - :r, 0) "
    "WHERE night_run_id = :n RETURNING spent_usd, in_flight_usd")


class NightSpend:
    """One child's view of the night's spend: the shared ledger of
    :class:`judgeflow.run.budget.RunBudget` (its ``night``). Every write
    returns the night's totals, kept as the child's latest reading."""

    def __init__(self, engine: Engine, night_run_id: str, *, clock=time.monotonic) -> None:
        self.engine, self.night_run_id, self._clock = engine, night_run_id, clock
        self._seen: tuple[float, float] = (0.0, 0.0)
        self._seen_at = -float("inf")

    def _keep(self, row) -> tuple[float, float]:
        if row is not None:
            self._seen, self._seen_at = (float(row[0]), float(row[1])), self._clock()
        return self._seen

    def reserve(self, usd: float) -> bool:
        """Hold ``usd`` in flight if the night's spend, its estimates in flight and this fit its budget."""
        with self.engine.begin() as conn:
            row = conn.execute(_RESERVE, {"n": self.night_run_id, "u": usd}).one_or_none()
        if row is None:
            self.totals(fresh=True)
            return False
        self._keep(row)
        return True

    def add(self, spent_usd: float, released_usd: float = 0.0) -> None:
        """``spent_usd`` billed, ``released_usd`` of estimates no longer in flight."""
        if spent_usd == 0 and released_usd == 0:
            return
        with self.engine.begin() as conn:
            self._keep(conn.execute(_SETTLE, {"n": self.night_run_id, "s": spent_usd, "r": released_usd}).one())

    def totals(self, *, fresh: bool = False) -> tuple[float, float]:
        """The night's (spent, in flight): read again when older than :data:`FRESH_S` or ``fresh``."""
        if fresh or self._clock() - self._seen_at > FRESH_S:
            with self.engine.connect() as conn:
                self._keep(night_spend(conn, self.night_run_id))
        return self._seen


_LOCK_NIGHT = text("SELECT trace_limit FROM judgeflow.night_ledger WHERE night_run_id = :n FOR UPDATE")
_TAKEN = text("SELECT trace_id FROM judgeflow.night_traces WHERE night_run_id = :n AND trace_id IN :ids"
              ).bindparams(bindparam("ids", expanding=True))
_COUNT = text("SELECT count(*) FROM judgeflow.night_traces WHERE night_run_id = :n")


class NightTraces:
    """The night's trace limit as one child applies it to what it claims (judgeflow/run/schedule.py)."""

    def __init__(self, engine: Engine, night_run_id: str) -> None:
        self.engine, self.night_run_id = engine, night_run_id

    def taken(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(_COUNT, {"n": self.night_run_id}).scalar_one())

    def take(self, trace_ids: list[str], limit: int) -> set[str]:
        """Of ``trace_ids`` (oldest first), those the night has taken already
        and the new ones up to ``limit`` traces for the night, entered now."""
        if not trace_ids:
            return set()
        with self.engine.begin() as conn:
            conn.execute(_LOCK_NIGHT, {"n": self.night_run_id})  # siblings count one after the other
            known = set(conn.execute(_TAKEN, {"n": self.night_run_id, "ids": trace_ids}).scalars())
            room = max(0, limit - int(conn.execute(_COUNT, {"n": self.night_run_id}).scalar_one()))
            new = [t for t in dict.fromkeys(trace_ids) if t not in known][:room]
            if new:
                conn.execute(text("INSERT INTO judgeflow.night_traces (night_run_id, trace_id) VALUES (:n, :t)"),
                             [{"n": self.night_run_id, "t": t} for t in new])
        return known | set(new)
