"""Which source the results in judgeflow's database belong to.

Every result records the source it was read from (``eval_results.source``,
judgeflow/sources/identity.py); status, report, show, the trend and the alert
rules count only the configured source's. :func:`adopt_source` runs at the start
of every command that reads or writes results. It

- records the configured source in ``judgeflow.result_sources``;
- assigns results stored before judgeflow recorded sources (``source`` NULL,
  from before migration 11_result_sources.py) to the configured source: they were read from it,
  since one results database had one source until then; so are the alert states
  and alert history of that time, and the judge epochs no source could be traced
  to (judgeflow/db/epochs.py);
- says so when the results database also holds other sources' results, and
  announces a source it has not seen before beside them (``JUDGEFLOW_SOURCE``
  or the source database switched).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection, text

_RECORD = text(
    "INSERT INTO judgeflow.result_sources AS s (source) VALUES (:source) "
    "ON CONFLICT (source) DO UPDATE SET last_seen_at = now() RETURNING (s.first_seen_at = now()) AS new"
)
_ADOPT = text("UPDATE judgeflow.eval_results SET source = :source WHERE source IS NULL")
_ADOPT_ALERTS = text(
    "UPDATE judgeflow.alerts a SET source = :source WHERE a.source = '' AND NOT EXISTS "
    "(SELECT 1 FROM judgeflow.alerts b WHERE b.source = :source AND b.rule = a.rule AND b.segment_key = a.segment_key)"
)
_ADOPT_EVENTS = text("UPDATE judgeflow.alert_events SET source = :source WHERE source IS NULL")
_OTHERS = text(
    "SELECT source, sum(n) FROM judgeflow.result_counts WHERE source IS DISTINCT FROM :source "
    "GROUP BY source HAVING sum(n) <> 0 ORDER BY source"
)


@dataclass
class SourceState:
    source: str
    new: bool = False  # first seen in this results database now
    adopted: int = 0  # results from before sources were recorded, assigned to it now
    others: dict[str, int] = field(default_factory=dict)  # other sources' results in this database

    def notes(self) -> list[str]:
        out = []
        if self.adopted:
            out.append(f"{self.adopted} result(s) stored before judgeflow recorded sources were assigned to "
                       f"{self.source}, the source configured now")
        if self.others:
            held = ", ".join(f"{n} of {s}" for s, n in self.others.items())
            lead = (f"the source changed: {self.source} is new in this results database, which also holds"
                    if self.new else "this results database also holds")
            out.append(f"{lead} results of other sources ({held}); status, report, show, the trend and the "
                       f"alert rules count only {self.source}'s")
        return out


def adopt_source(conn: Connection, source: str) -> SourceState:
    """Record ``source``, adopt unsourced results, and list the other sources (in
    the caller's transaction)."""
    state = SourceState(source)
    state.new = bool(conn.execute(_RECORD, {"source": source}).scalar())
    if conn.execute(text("SELECT EXISTS (SELECT 1 FROM judgeflow.eval_results WHERE source IS NULL)")).scalar():
        state.adopted = conn.execute(_ADOPT, {"source": source}).rowcount
    adopt_alert_state(conn, source)
    state.others = {s or "(none)": int(n) for s, n in conn.execute(_OTHERS, {"source": source}).all()}
    return state


def adopt_alert_state(conn: Connection, source: str) -> None:
    """Alert states, history and judge epochs from before sources were recorded become ``source``'s."""
    from judgeflow.db.epochs import adopt_epochs

    conn.execute(_ADOPT_ALERTS, {"source": source})
    conn.execute(_ADOPT_EVENTS, {"source": source})
    adopt_epochs(conn, source)


def adopt_configured_source(engine, settings) -> SourceState:
    """:func:`adopt_source` for the configured source, in a transaction of its own."""
    from judgeflow.sources.identity import result_source

    with engine.begin() as conn:
        return adopt_source(conn, result_source(settings))
