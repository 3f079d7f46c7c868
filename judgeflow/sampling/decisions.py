"""``judgeflow.sample_decisions``: one row per trace a sample budget decided
on, with its night, stratum, phase, inclusion probability and whether it is
judged; ``judgeflow.sample_strata``: each stratum's inclusion probability for
the night; ``judgeflow.sample_ledger``: what each run of a night billed.

- A selected trace's results weigh ``1 / inclusion_prob`` in every rate
  (judgeflow/alerts/estimates.py).
- A trace not selected is neither pending nor failed for nightly runs
  (judgeflow/db/pairs.py) and does not hold the watermark back; `judgeflow
  status` counts it.
- A trace that arrives after its stratum's plan is selected against the
  stratum's planned probability (judgeflow/sampling/selection.py). After each
  run, :func:`settle` sets a stratum's sample weights to what its judged
  results stand for (its traces over those judged), so late traces, and
  selected ones the budget left unjudged, stay in the stratum's population.
- A backfill can still judge traces not selected. :func:`reweigh` then puts
  them, and every trace of their stratum created within the span they cover,
  in the stratum's *certainty* phase (weight 1: judged in full); the rest of
  the stratum stays a sample at its own probability. Giving the whole stratum
  one new probability instead would weigh a backfilled hour like the night.
- Traces never planned have no row and weigh 1.
- A sampled night's quiet sessions are decided on here too, in the phase
  'session' (judgeflow/sampling/sessions.py): the trace strata's queries below
  read the phases 'sample' and 'certainty' only.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Sequence

from sqlalchemy import Connection, text

from judgeflow.sampling.selection import select
from judgeflow.sources.types import TraceKey

# SQL: the weight of an eval_results row (joined as ``d``)
WEIGHT_SQL = "COALESCE(1.0 / d.inclusion_prob, 1.0)"
# the join that brings it; eval_results must be unaliased (its columns are unqualified in the rates' SQL)
WEIGHT_JOIN = " LEFT JOIN judgeflow.sample_decisions d ON d.trace_id = judgeflow.eval_results.trace_id"


def record(conn: Connection, night: date, stratum: str, keys: Sequence[TraceKey], selected: set[str], *,
           inclusion_prob: float, cost_per_trace: float, flow_run_id: str | None, phase: str = "sample") -> int:
    """Insert the decisions of one stratum; a trace already decided keeps its
    first decision. Returns the rows written."""
    if not keys:
        return 0
    result = conn.execute(
        text(
            """
            INSERT INTO judgeflow.sample_decisions
                (trace_id, night, stratum, inclusion_prob, selected, est_cost_usd, created_at, planned_by, phase)
            SELECT k.id, :night, :stratum, :p, k.id = ANY(CAST(:selected AS text[])), :cost, k.at, :run, :phase
            FROM unnest(CAST(:ids AS text[]), CAST(:ats AS timestamptz[])) AS k(id, at)
            ON CONFLICT (trace_id) DO NOTHING
            """
        ),
        {"night": night, "stratum": stratum, "p": inclusion_prob, "selected": sorted(selected),
         "cost": cost_per_trace, "run": flow_run_id, "phase": phase, "ids": [k.id for k in keys],
         "ats": [k.created_at for k in keys]},
    )
    return result.rowcount or 0


def reweigh(conn: Connection) -> int:
    """Traces not selected that have since been judged (by a backfill), and
    every trace of their (night, stratum) created within the span they cover,
    move to the certainty phase: selected, inclusion probability 1. Returns
    the traces not selected that moved."""
    spans = conn.execute(
        text(
            """
            WITH judged AS (
                UPDATE judgeflow.sample_decisions d SET selected = true, phase = 'certainty', inclusion_prob = 1.0
                WHERE NOT d.selected AND d.phase <> 'session'
                  AND EXISTS (SELECT 1 FROM judgeflow.eval_results r
                              WHERE r.trace_id = d.trace_id AND r.status = 'scored')
                RETURNING night, stratum, created_at
            )
            SELECT night, stratum, min(created_at) AS lo, max(created_at) AS hi, count(*) AS n
            FROM judged GROUP BY 1, 2
            """
        )
    ).all()
    for night, stratum, lo, hi, _ in spans:
        conn.execute(
            text(
                """
                UPDATE judgeflow.sample_decisions SET phase = 'certainty', inclusion_prob = 1.0
                WHERE night = :n AND stratum = :s AND selected AND phase = 'sample'
                  AND created_at BETWEEN :lo AND :hi
                """
            ),
            {"n": night, "s": stratum, "lo": lo, "hi": hi},
        )
    settle(conn, [night for night, *_ in spans])
    return sum(n for *_, n in spans)


def settle(conn: Connection, nights: Sequence[date]) -> None:
    """The sample phase of each (night, stratum) of ``nights`` weighs what it
    stands for: its inclusion probability becomes the share of its traces that
    have a scored result. Selected traces not judged (the budget ran out) and
    traces that arrived late are so counted in the stratum's population, and
    its judged results weigh for them; a class with nothing judged keeps its
    planned probability."""
    if not nights:
        return
    conn.execute(
        text(
            """
            UPDATE judgeflow.sample_decisions d SET inclusion_prob = s.p
            FROM (SELECT x.night, x.stratum,
                         (count(*) FILTER (WHERE EXISTS (SELECT 1 FROM judgeflow.eval_results r
                                                         WHERE r.trace_id = x.trace_id AND r.status = 'scored'))
                         )::float / count(*) AS p
                  FROM judgeflow.sample_decisions x
                  WHERE x.night = ANY(CAST(:nights AS date[])) AND x.phase = 'sample'
                  GROUP BY 1, 2) s
            WHERE d.night = s.night AND d.stratum = s.stratum AND d.phase = 'sample' AND s.p > 0
              AND d.inclusion_prob IS DISTINCT FROM s.p
            """
        ),
        {"nights": sorted(set(nights))},
    )
    # the sessions each run decided on (judgeflow/sampling/sessions.py), likewise: a session counts as
    # judged when a result scored it at the turns it was decided with (its last turn's time)
    conn.execute(
        text(
            """
            UPDATE judgeflow.sample_decisions d SET inclusion_prob = s.p
            FROM (SELECT x.night, x.planned_by,
                         (count(*) FILTER (WHERE x.selected AND EXISTS (
                             SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = x.trace_id
                             AND r.status = 'scored' AND r.trace_created_at = x.created_at)))::float / count(*) AS p
                  FROM judgeflow.sample_decisions x
                  WHERE x.night = ANY(CAST(:nights AS date[])) AND x.phase = 'session'
                  GROUP BY 1, 2) s
            WHERE d.night = s.night AND d.planned_by IS NOT DISTINCT FROM s.planned_by AND d.phase = 'session'
              AND s.p > 0 AND d.inclusion_prob IS DISTINCT FROM s.p
            """
        ),
        {"nights": sorted(set(nights))},
    )


def forget(conn: Connection, ids: Sequence[str]) -> None:
    """Drop the decisions on ``ids``: a session decided again once it grew (its latest turns are a new unit)."""
    conn.execute(text("DELETE FROM judgeflow.sample_decisions WHERE trace_id = ANY(CAST(:ids AS text[]))"),
                 {"ids": list(ids)})


def decided(conn: Connection, ids: Sequence[str]) -> dict[str, tuple[datetime | None, bool]]:
    """The decisions on ``ids``: (the decided unit's time, selected)."""
    rows = conn.execute(text("SELECT trace_id, created_at, selected FROM judgeflow.sample_decisions "
                             "WHERE trace_id = ANY(CAST(:ids AS text[]))"), {"ids": list(ids)}).all()
    return {t: (at, bool(sel)) for t, at, sel in rows}


def stratum_probs(conn: Connection, night: date) -> dict[str, float]:
    """The night's strata planned so far, with their inclusion probabilities."""
    rows = conn.execute(text("SELECT stratum, inclusion_prob FROM judgeflow.sample_strata WHERE night = :n"),
                        {"n": night}).all()
    return {s: float(p) for s, p in rows}


def sample_pools(conn: Connection, night: date) -> dict[str, tuple[int, int, float]]:
    """Per stratum planned tonight: the traces of its sample phase, how many
    of them are selected, and its cost per trace."""
    rows = conn.execute(
        text(
            """
            SELECT s.stratum, count(d.trace_id), count(d.trace_id) FILTER (WHERE d.selected), s.cost_per_trace
            FROM judgeflow.sample_strata s
            LEFT JOIN judgeflow.sample_decisions d ON d.night = s.night AND d.stratum = s.stratum AND d.phase = 'sample'
            WHERE s.night = :n GROUP BY s.stratum, s.cost_per_trace
            """
        ),
        {"n": night},
    ).all()
    return {s: (int(pop), int(sel), float(c)) for s, pop, sel, c in rows}


# a stratum is priced from its own traces judged tonight once it has this many, else from the night's
MIN_TONIGHT = 10


def tonight_price_ratios(conn: Connection, night: date, n_metrics: int) -> dict[str | None, float]:
    """Per stratum of the night (and the night's, under None): what its traces
    judged so far (every metric, ``n_metrics``) billed over the cost per trace
    they were planned at: a stratum planned earlier tonight is priced again at
    its recorded cost per trace times this (a raised budget, a top-up)."""
    rows = conn.execute(
        text(
            """
            WITH judged AS (
                SELECT d.trace_id, d.stratum, d.est_cost_usd, sum(r.cost_usd) AS usd, count(*) AS metrics
                FROM judgeflow.sample_decisions d
                JOIN judgeflow.eval_results r ON r.trace_id = d.trace_id AND r.status = 'scored'
                     AND r.judge_calls > 0 AND r.cost_usd > 0
                WHERE d.night = :n AND d.phase = 'sample' AND d.est_cost_usd > 0
                GROUP BY 1, 2, 3)
            SELECT stratum, count(*), sum(usd), sum(est_cost_usd) FROM judged WHERE metrics >= :m GROUP BY stratum
            """
        ),
        {"n": night, "m": n_metrics},
    ).all()
    out: dict[str | None, float] = {s: float(b) / float(e) for s, k, b, e in rows if k >= MIN_TONIGHT}
    if sum(k for _, k, _, _ in rows) >= MIN_TONIGHT:
        out[None] = float(sum(b for *_, b, _ in rows)) / float(sum(e for *_, e in rows))
    return out


def extend(conn: Connection, night: date, stratum: str, more: int) -> datetime | None:
    """Select ``more`` of the stratum's traces not selected and still without a
    result, smallest selection key first (judgeflow/sampling/selection.py): the
    traces selected before stay selected. Its probability becomes what it now
    selects of its sample phase, for its decisions and for traces arriving
    later. Returns when the oldest trace newly selected was created (None: none)."""
    waiting = conn.execute(
        text(
            """
            SELECT d.trace_id, d.created_at FROM judgeflow.sample_decisions d
            WHERE d.night = :n AND d.stratum = :s AND d.phase = 'sample' AND NOT d.selected
              AND NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = d.trace_id)
            """
        ),
        {"n": night, "s": stratum},
    ).all()
    created = dict(waiting)
    chosen = sorted(select(created, more, night))
    conn.execute(text("UPDATE judgeflow.sample_decisions SET selected = true "
                      "WHERE trace_id = ANY(CAST(:ids AS text[]))"), {"ids": chosen})
    conn.execute(
        text(
            """
            WITH p AS (SELECT (count(*) FILTER (WHERE selected))::float / count(*) AS p
                       FROM judgeflow.sample_decisions WHERE night = :n AND stratum = :s AND phase = 'sample')
            , strata AS (UPDATE judgeflow.sample_strata SET inclusion_prob = (SELECT p FROM p)
                         WHERE night = :n AND stratum = :s)
            UPDATE judgeflow.sample_decisions SET inclusion_prob = (SELECT p FROM p)
            WHERE night = :n AND stratum = :s AND phase = 'sample'
            """
        ),
        {"n": night, "s": stratum},
    )
    return min((created[t] for t in chosen), default=None)


def could_raise(conn: Connection, budget_usd: float) -> bool:
    """Whether a run under ``budget_usd`` would judge more of tonight's traces
    than the night's earlier plans: a larger budget than theirs, and traces
    they did not select still waiting."""
    return bool(conn.execute(
        text(
            """
            WITH night AS (SELECT (now() AT TIME ZONE 'UTC')::date AS n)
            SELECT (SELECT max(budget_usd) FROM judgeflow.sample_ledger WHERE night = (SELECT n FROM night)) < :b
               AND EXISTS (SELECT 1 FROM judgeflow.sample_decisions d
                           WHERE d.night = (SELECT n FROM night) AND d.phase = 'sample' AND NOT d.selected
                             AND NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = d.trace_id))
            """
        ),
        {"b": budget_usd},
    ).scalar_one())


def record_stratum(conn: Connection, night: date, stratum: str, prob: float, cost_per_trace: float) -> None:
    """A stratum's probability for the night; the first plan of it stands."""
    conn.execute(
        text(
            """
            INSERT INTO judgeflow.sample_strata (night, stratum, inclusion_prob, cost_per_trace)
            VALUES (:n, :s, :p, :c) ON CONFLICT (night, stratum) DO NOTHING
            """
        ),
        {"n": night, "s": stratum, "p": prob, "c": cost_per_trace},
    )


# Per run of a night, what it is known to have billed over the night's decided
# traces: what its result rows (and the rows a later write superseded) recorded,
# plus the estimated cost of each trace it still holds a claim on (a claim is
# released in the write of its result: a pair claimed and not written was in
# flight, judged and waiting for its write, or not started). A run killed before
# it entered its figure in the ledger is known by these.
_RECORDED_PER_RUN = """
    WITH recorded AS (
        SELECT r.flow_run_id AS run, r.cost_usd AS usd FROM judgeflow.sample_decisions d
        JOIN judgeflow.eval_results r ON r.trace_id = d.trace_id WHERE d.night = :n AND r.cost_usd > 0
        UNION ALL
        SELECT s.flow_run_id, s.cost_usd FROM judgeflow.sample_decisions d
        JOIN judgeflow.superseded_results s ON s.trace_id = d.trace_id WHERE d.night = :n AND s.cost_usd > 0
        UNION ALL
        SELECT run, usd FROM (
            SELECT DISTINCT l.flow_run_id AS run, c.trace_id, d.est_cost_usd AS usd FROM judgeflow.sample_ledger l
            JOIN judgeflow.claims c ON starts_with(c.owner, l.flow_run_id || ':')
            JOIN judgeflow.sample_decisions d ON d.trace_id = c.trace_id AND d.night = :n
            WHERE l.night = :n) held
    )
    SELECT l.flow_run_id, GREATEST(l.spent_usd, coalesce((SELECT sum(usd) FROM recorded WHERE run = l.flow_run_id), 0))
           AS spent
    FROM judgeflow.sample_ledger l WHERE l.night = :n
"""


def night_spent_usd(conn: Connection, night: date, *, recover: bool = False) -> float:
    """What the night's runs under the sample budget billed (every billed
    attempt): per run, its ledger figure, or what its results recorded when
    that is more (a run killed before it entered its figure). ``recover``:
    write that back to the ledger, so a later re-score of a killed run's pairs
    (which replaces their rows) does not lose what the killed run billed."""
    rows = conn.execute(text(_RECORDED_PER_RUN), {"n": night}).all()
    if recover:
        for run, spent in rows:
            conn.execute(text("UPDATE judgeflow.sample_ledger SET spent_usd = :s "
                              "WHERE night = :n AND flow_run_id = :r AND spent_usd < :s"),
                         {"n": night, "r": run, "s": spent})
    return float(sum(spent for _, spent in rows))


def open_run(conn: Connection, night: date, flow_run_id: str, budget_usd: float) -> None:
    """Enter a run in the night's ledger before it judges anything: killed
    before it records its figure, it is still known, and what its results
    recorded counts against the night (:func:`night_spent_usd`)."""
    conn.execute(
        text(
            """
            INSERT INTO judgeflow.sample_ledger (night, flow_run_id, budget_usd, spent_usd)
            VALUES (:n, :r, :b, 0) ON CONFLICT (night, flow_run_id) DO NOTHING
            """
        ),
        {"n": night, "r": flow_run_id, "b": budget_usd},
    )


def night_budget_usd(conn: Connection, night: date) -> float | None:
    """The largest sample budget an earlier run of the night planned under (None: no run yet)."""
    value = conn.execute(text("SELECT max(budget_usd) FROM judgeflow.sample_ledger WHERE night = :n"),
                         {"n": night}).scalar_one()
    return None if value is None else float(value)


def pending_selected_usd(conn: Connection, night: date) -> float:
    """The estimated cost of the night's selected traces still without a result: money already promised."""
    return float(conn.execute(
        text(
            """
            SELECT coalesce(sum(est_cost_usd), 0) FROM judgeflow.sample_decisions d
            WHERE d.night = :n AND d.selected
              AND NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = d.trace_id)
            """
        ),
        {"n": night},
    ).scalar_one())


# a night's first run: the one its ledger entered first (a run enters at its start and again at its end, and
# the runs of a night follow one another)
_FIRST_RUN = """(SELECT flow_run_id FROM judgeflow.sample_ledger l WHERE l.night = d.night
                 ORDER BY l.recorded_at, l.flow_run_id LIMIT 1)"""


def late_share(conn: Connection, night: date, *, nights: int = 7) -> float | None:
    """Of the traces decided in the ``nights`` nights before ``night``, the
    share a later run of their night decided (they arrived after its first
    plan); None without such nights."""
    value = conn.execute(
        text(
            f"""
            SELECT (count(*) FILTER (WHERE d.planned_by IS DISTINCT FROM {_FIRST_RUN}))::float / NULLIF(count(*), 0)
            FROM judgeflow.sample_decisions d
            WHERE d.night >= CAST(:n AS date) - :k AND d.night < :n AND d.phase = 'sample'
            """
        ),
        {"n": night, "k": nights},
    ).scalar_one()
    return None if value is None else float(value)


def late_committed_usd(conn: Connection, night: date) -> float:
    """The estimated cost of the night's selected traces decided after its first run: what the late reserve paid."""
    return float(conn.execute(
        text(
            f"""
            SELECT coalesce(sum(d.est_cost_usd), 0) FROM judgeflow.sample_decisions d
            WHERE d.night = :n AND d.selected AND d.phase <> 'session' AND d.planned_by IS DISTINCT FROM {_FIRST_RUN}
            """
        ),
        {"n": night},
    ).scalar_one())


def record_spend(conn: Connection, night: date, flow_run_id: str, budget_usd: float, spent_usd: float) -> None:
    """What one run billed under the night's sample budget (its last figure stands)."""
    conn.execute(
        text(
            """
            INSERT INTO judgeflow.sample_ledger (night, flow_run_id, budget_usd, spent_usd)
            VALUES (:n, :r, :b, :s)
            ON CONFLICT (night, flow_run_id) DO UPDATE SET spent_usd = EXCLUDED.spent_usd, budget_usd = EXCLUDED.budget_usd,
                recorded_at = now()
            """
        ),
        {"n": night, "r": flow_run_id, "b": budget_usd, "s": spent_usd},
    )


def not_sampled_waiting(conn: Connection) -> int:
    """Traces not selected and still without a result: what `judgeflow status` reports."""
    return int(conn.execute(
        text(
            "SELECT count(*) FROM judgeflow.sample_decisions d WHERE NOT d.selected AND d.phase <> 'session' "
            "AND NOT EXISTS (SELECT 1 FROM judgeflow.eval_results r WHERE r.trace_id = d.trace_id)"
        )
    ).scalar_one())


def any_in_range(conn: Connection, since) -> bool:
    """Whether any trace created since ``since`` was sampled: rates over such a
    period are weighted (otherwise every weight is 1 and no join is needed)."""
    return bool(conn.execute(
        text("SELECT EXISTS (SELECT 1 FROM judgeflow.sample_decisions WHERE created_at >= :s)"), {"s": since}
    ).scalar_one())
