"""The result rollup: what alert rules, the trend, `status`'s rates and
`report` read instead of the results (migration 16_result_rollup.py).

``judgeflow.result_rollup`` holds, per (source, metric, metric version, epoch
mark, UTC trace hour, status, passed, segment key, segment value, sample
class), the results counted; key '' is overall, and a result adds one line per
segment key it has a value for (never one per combination of keys). The
sample class is its trace's (night, stratum, inclusion probability), so a
stratified estimate (judgeflow/alerts/estimates.py) reads the same classes
from the rollup as from the results. Statement triggers on ``eval_results``,
``sample_decisions`` and ``judge_epochs`` keep it in the writing transaction,
as lines of deltas that :func:`compact_rollup` folds.

The epoch mark of a result is the latest start of a judge epoch of its metric
(any source's) at or before it was scored: a result was scored in epoch E's
time exactly when its mark is at or after E's start, so each source's epoch in
force is decided from the lines (:meth:`CountRow.in_epoch`).

:func:`read_counts` is the one read an evaluation makes: every whole trace hour
from the rollup, and the hours a period boundary cuts (and hours the rollup
does not hold yet, see :func:`build_step`) from ``eval_results`` by its
``(metric, trace_created_at)`` index, cut at every boundary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Callable, Iterable

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from judgeflow.db.epochs import Epoch

HOUR = timedelta(hours=1)
NEVER = datetime.min.replace(tzinfo=timezone.utc)
FOREVER = datetime.max.replace(tzinfo=timezone.utc)
# hours a backfill step recomputes in one short transaction
BUILD_HOURS = 6
# a segment key with more values than this over the rollup is named by `db check`
EXPLODING_VALUES = 10_000

# a result's epoch mark and sample class (as migration 16_result_rollup.py writes them)
_MARK = ("(SELECT max(e.started_at) FROM judgeflow.judge_epochs e "
         "WHERE e.metric = r.metric AND e.started_at <= r.scored_at)")
_PROB = "coalesce(d.inclusion_prob, 1.0)"
_SEGMENTS = """
    CROSS JOIN LATERAL (
        SELECT '' AS seg_key, '' AS seg_value
        UNION ALL
        SELECT key, value FROM jsonb_each_text(
            CASE WHEN jsonb_typeof(r.segment) = 'object' THEN r.segment ELSE '{}'::jsonb END)
        WHERE value IS NOT NULL
    ) s"""
# The window index with every column the cut hours' read needs (source and
# trace id beside migration 09_judge_epochs.py's): that read is index-only.
WINDOW_INDEX = "eval_results_metric_created_idx"
COVERING = ("CREATE INDEX CONCURRENTLY {name} ON judgeflow.eval_results (metric, trace_created_at) "
            "INCLUDE (status, passed, segment, metric_version, scored_at, source, trace_id)")
_NEW_INDEX = "eval_results_window_cover_idx"

# a rollup line's dimensions (migration 16_result_rollup.py)
_DIMS = ("source, metric, metric_version, epoch_mark, trace_hour, status, passed, seg_key, seg_value, "
         "s_night, s_stratum, s_prob")
# A read groups its text columns by byte order ("C"): the order of a group does
# not matter, and comparing under the database's collation was most of the time
# of its sort.
_BYTES = ", ".join(f'{{p}}{c} COLLATE "C" AS {c}'
                   for c in ("source", "metric", "metric_version", "status", "seg_key", "seg_value", "s_stratum"))
# the grouping of a read: every dimension but the hour
_GROUP = "source, metric, metric_version, epoch_mark, day, slot, status, passed, seg_key, seg_value, " \
         "s_night, s_stratum, s_prob"


# the newest and oldest trace times, from the ends of the window index per metric (as migration 16_result_rollup.py)
_ENDS = """
    WITH RECURSIVE metrics AS (
        SELECT min(metric) AS metric FROM judgeflow.eval_results
        UNION ALL
        SELECT (SELECT min(metric) FROM judgeflow.eval_results WHERE metric > m.metric) FROM metrics m
        WHERE m.metric IS NOT NULL
    )
    SELECT max((SELECT max(trace_created_at) FROM judgeflow.eval_results r WHERE r.metric = m.metric)) AS newest,
           min((SELECT min(trace_created_at) FROM judgeflow.eval_results r WHERE r.metric = m.metric)) AS oldest,
           array_agg(m.metric) AS metrics
    FROM metrics m WHERE m.metric IS NOT NULL"""


def floor_hour(at: datetime) -> datetime:
    at = at.astimezone(timezone.utc)
    return at.replace(minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class CountRow:
    """Results of one group over the trace times ``[lo, hi)``, which no period
    boundary cuts, in one sample class (``night``, ``stratum``, ``prob``)."""

    source: str | None
    metric: str
    metric_version: str | None
    epoch_mark: datetime | None
    lo: datetime
    hi: datetime
    status: str
    passed: bool | None
    seg_key: str
    seg_value: str
    night: date | None
    stratum: str | None
    prob: float
    n: int

    def in_epoch(self, epochs: dict[str, Epoch]) -> bool:
        """Whether these results belong to their metric's epoch in ``epochs`` (no
        epoch: they do), as judgeflow/db/epochs.py in_epoch_sql decides for a result."""
        epoch = epochs.get(self.metric)
        if epoch is None:
            return True
        return (self.epoch_mark is not None and self.epoch_mark >= epoch.started_at
                and self.metric_version in (epoch.metric_version, None))

    @property
    def sample_class(self) -> tuple[date | None, str | None, float]:
        return self.night, self.stratum, self.prob


@dataclass(frozen=True)
class RollupState:
    built_from: datetime  # hours at or after it are in the rollup
    oldest_hour: datetime | None  # the oldest trace hour there was when the rollup was installed

    @property
    def built(self) -> bool:
        return self.built_from == NEVER or (self.oldest_hour is not None and self.built_from <= self.oldest_hour)

    def hours_left(self) -> int:
        if self.built or self.oldest_hour is None:
            return 0
        return int((self.built_from - self.oldest_hour) / HOUR)


def rollup_state(conn: Connection) -> RollupState | None:
    """Where the rollup is built from (None: no rollup, an older schema)."""
    if not conn.execute(text("SELECT to_regclass('judgeflow.rollup_state') IS NOT NULL")).scalar():
        return None
    row = conn.execute(text(
        "SELECT CASE WHEN isfinite(built_from) THEN built_from END AS built_from, oldest_hour "
        "FROM judgeflow.rollup_state WHERE id = 1")).one()
    return RollupState(NEVER if row.built_from is None else row.built_from, row.oldest_hour)


def _day(column: str, by_day: bool) -> str:
    return f"date_trunc('day', {column} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'" if by_day else "NULL::timestamptz"


def _slot(column: str) -> str:
    """SQL: how many of the (sorted) bounds are at or before ``column``: lines of one slot lie between two bounds."""
    return f"width_bucket({column}, CAST(:bounds AS timestamptz[]))"


def _mark(conn: Connection, metrics: list[str]) -> tuple[str, dict]:
    """SQL over a result's columns: its epoch mark, from the epoch starts of its
    metric passed as a sorted array (no lookup per result), and its parameters."""
    starts: dict[str, list[datetime]] = {}
    for metric, started_at in conn.execute(text(
            "SELECT metric, started_at FROM judgeflow.judge_epochs WHERE metric = ANY(CAST(:m AS text[])) "
            "ORDER BY 1, 2"), {"m": metrics}):
        starts.setdefault(metric, []).append(started_at)
    if not starts:
        return "NULL::timestamptz", {}
    branches, params = [], {}
    for i, (metric, values) in enumerate(sorted(starts.items())):
        arr = f"CAST(:mark_starts_{i} AS timestamptz[])"
        branches.append(f"WHEN :mark_metric_{i} THEN ({arr})[width_bucket(r.scored_at, {arr})]")
        params.update({f"mark_metric_{i}": metric, f"mark_starts_{i}": values})
    return f"(CASE r.metric {' '.join(branches)} END)", params


def _lines(rows, bounds: list[datetime]) -> list[CountRow]:
    """CountRows from rows grouped by :data:`_GROUP` with their ``n``."""
    out = []
    for r in rows:
        lo = bounds[r.slot - 1] if r.slot > 0 else NEVER
        hi = bounds[r.slot] if r.slot < len(bounds) else FOREVER
        if r.day is not None:
            lo, hi = max(lo, r.day), min(hi, r.day + timedelta(days=1))
        out.append(CountRow(r.source, r.metric, r.metric_version, r.epoch_mark, lo, hi, r.status, r.passed,
                            r.seg_key, r.seg_value, r.s_night, r.s_stratum, float(r.s_prob), int(r.n)))
    return out


_HOUR_OF = "date_trunc('hour', {c} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"


def _rollup_part(by_day: bool) -> str:
    """The rollup's lines from ``:since`` on but the hours read whole from the
    results (``:skip``); a split hour's lines keep their hour (``split_hour``)."""
    return f"""
        SELECT 'rollup' AS part, CASE WHEN trace_hour = ANY(CAST(:split AS timestamptz[])) THEN trace_hour END
                   AS split_hour,
               {_BYTES.format(p="")}, epoch_mark, passed, s_night, s_prob, n,
               {_day("trace_hour", by_day)} AS day, {_slot("trace_hour")} AS slot
        FROM judgeflow.result_rollup
        WHERE trace_hour >= :since AND metric = ANY(CAST(:metrics AS text[]))
          AND NOT (trace_hour = ANY(CAST(:skip AS timestamptz[])))
          AND (source = ANY(CAST(:sources AS text[])) OR source IS NULL)"""


def _raw_part(conn: Connection, ranges: list[tuple[datetime, datetime]], metrics: list[str],
              by_day: bool) -> tuple[str, dict]:
    """The results of ``ranges`` read by the window index, grouped as the
    rollup's lines are read: grouped by their segment object first, so each
    combination of values is expanded into its keys once, not once per result."""
    # one index range scan per range, each bounded on both of the index's columns
    in_ranges = " UNION ALL ".join(
        "SELECT trace_id, source, metric, metric_version, scored_at, trace_created_at, status, passed, segment "
        "FROM judgeflow.eval_results WHERE metric = ANY(CAST(:metrics AS text[])) "
        f"AND trace_created_at >= :lo_{i} AND trace_created_at < :hi_{i}" for i in range(len(ranges)))
    params = {k: v for i, (lo, hi) in enumerate(ranges) for k, v in ((f"lo_{i}", lo), (f"hi_{i}", hi))}
    mark, mark_params = _mark(conn, metrics)
    # without a sampled trace in the ranges every result is of the class of no decision: no join
    sampled = any_sampled(conn, min(lo for lo, _ in ranges))
    decisions = ("LEFT JOIN judgeflow.sample_decisions d ON d.trace_id = r.trace_id" if sampled else
                 "LEFT JOIN (SELECT NULL::date AS night, NULL::text AS stratum, NULL::float8 AS inclusion_prob) d "
                 "ON false")
    hour = _HOUR_OF.format(c="r.trace_created_at")
    sql = f"""
        SELECT 'results' AS part, g.split_hour, g.source, g.metric, g.metric_version, g.status, s.seg_key,
               s.seg_value, g.s_stratum, g.epoch_mark, g.passed, g.s_night, g.s_prob, g.n, g.day, g.slot
        FROM (
            SELECT CASE WHEN {hour} = ANY(CAST(:split AS timestamptz[])) THEN {hour} END AS split_hour,
                   r.source COLLATE "C" AS source, r.metric COLLATE "C" AS metric,
                   r.metric_version COLLATE "C" AS metric_version, {mark} AS epoch_mark,
                   {_day("r.trace_created_at", by_day)} AS day, {_slot("r.trace_created_at")} AS slot,
                   r.status COLLATE "C" AS status, r.passed, r.segment, d.night AS s_night,
                   d.stratum COLLATE "C" AS s_stratum, {_PROB} AS s_prob, count(*) AS n
            FROM ({in_ranges}) r {decisions}
            WHERE (r.source = ANY(CAST(:sources AS text[])) OR r.source IS NULL)
            GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13
        ) g
        CROSS JOIN LATERAL (
            SELECT '' COLLATE "C" AS seg_key, '' COLLATE "C" AS seg_value
            UNION ALL
            SELECT key COLLATE "C", value COLLATE "C" FROM jsonb_each_text(
                CASE WHEN jsonb_typeof(g.segment) = 'object' THEN g.segment ELSE '{{}}'::jsonb END)
            WHERE value IS NOT NULL
        ) s"""
    return sql, dict(params, **mark_params)


def any_sampled(conn: Connection, since: datetime) -> bool:
    """Whether a trace created since ``since`` has a sample decision."""
    return bool(conn.execute(
        text("SELECT EXISTS (SELECT 1 FROM judgeflow.sample_decisions WHERE created_at >= :s)"), {"s": since}
    ).scalar_one())


@dataclass(frozen=True)
class _Plan:
    """Where each hour of a read comes from: ``ranges`` of results (the hours
    not built yet, the hours two bounds cut, and the smaller side of an hour
    one bound cuts), the hours the rollup leaves to them (``skip``), and per
    ``split`` hour the side not read from the results, [lo, hi): the rollup's
    whole hour less the side read."""

    ranges: list[tuple[datetime, datetime]]
    skip: list[datetime]
    split: dict[datetime, tuple[datetime, datetime]]


def _plan(since: datetime, bounds: list[datetime], built_from: datetime) -> _Plan:
    since_hour = floor_hour(since)
    ranges, skip, split = [], [], {}
    if built_from > since_hour:  # hours not built yet: from the results
        ranges.append((since, built_from))
    for h in sorted({floor_hour(b) for b in bounds if b > floor_hour(b)}):
        if h < built_from:
            continue
        inside = [b for b in bounds if h < b < h + HOUR]
        if len(inside) != 1:
            ranges.append((h, h + HOUR))
            skip.append(h)
            continue
        b = inside[0]
        if b - h <= h + HOUR - b:
            ranges.append((h, b))
            split[h] = (b, h + HOUR)
        else:
            ranges.append((b, h + HOUR))
            split[h] = (h, b)
    return _Plan(ranges, skip, split)


def read_counts(conn: Connection, *, since: datetime, bounds: Iterable[datetime], metrics: list[str],
                sources: Iterable[str | None], by_day: bool = False) -> list[CountRow]:
    """Every result of ``metrics`` and ``sources`` (or of no source yet) with a
    trace time at or after ``since``, in lines no bound of ``bounds`` cuts (one
    per slot between two bounds and group; with ``by_day``, per UTC day too),
    in one statement (one snapshot): whole hours from the rollup; of an hour
    one bound cuts, the smaller side from the results by the window index and
    the other as the rollup's hour less it; hours two bounds cut (and hours the
    rollup is not built for yet) from the results."""
    bounds = sorted(set(bounds) | {since})
    state = rollup_state(conn)
    built_from = FOREVER if state is None else state.built_from
    plan = _plan(since, bounds, built_from)
    parts, params = [], dict(bounds=bounds, metrics=metrics, split=list(plan.split), skip=plan.skip,
                             since=max(floor_hour(since), built_from),
                             sources=[s for s in set(sources) if s is not None])
    if plan.ranges:
        sql, raw_params = _raw_part(conn, plan.ranges, metrics, by_day)
        parts.append(sql)
        params.update(raw_params)
    if built_from < FOREVER:
        parts.append(_rollup_part(by_day))
    # Compiling these short reads costs more than running them (the planner's
    # estimates over millions of results would otherwise JIT them), and a hash
    # groups them faster than a sort on a dozen columns, a JSON object among
    # them. Both for this transaction only: a pooled connection keeps no state.
    conn.execute(text("SET LOCAL jit = off"))
    conn.execute(text("SET LOCAL enable_sort = off"))
    rows = conn.execute(text(
        f"SELECT part, split_hour, {_GROUP}, sum(n) AS n FROM ({' UNION ALL '.join(parts)}) u "
        f"GROUP BY part, split_hour, {_GROUP} HAVING sum(n) <> 0"), params).all()
    return _with_split_hours(rows, bounds, plan.split)


def _with_split_hours(rows, bounds: list[datetime], split: dict[datetime, tuple[datetime, datetime]]
                      ) -> list[CountRow]:
    """The lines of a read; a split hour's side not read from the results is
    the rollup's whole hour less the side that was, per group."""
    out = _lines([r for r in rows if r.split_hour is None or r.part != "rollup"], bounds)
    rest: dict[tuple, int] = {}
    for r in rows:
        if r.split_hour is None:
            continue
        key = (r.split_hour, r.source, r.metric, r.metric_version, r.epoch_mark, r.status, r.passed, r.seg_key,
               r.seg_value, r.s_night, r.s_stratum, float(r.s_prob))
        rest[key] = rest.get(key, 0) + (int(r.n) if r.part == "rollup" else -int(r.n))
    for (hour, *dims), n in rest.items():
        if n:
            lo, hi = split[hour]
            source, metric, version, mark, status, passed, seg_key, seg_value, night, stratum, prob = dims
            out.append(CountRow(source, metric, version, mark, lo, hi, status, passed, seg_key, seg_value,
                                night, stratum, prob, n))
    return out


def compact_rollup(engine: Engine) -> int:
    """Fold the deltas of every hour that has some into one line per group.
    Concurrent writers add deltas it does not see and keeps; a backfill step or
    another compaction touching the same lines makes one of them give up
    (REPEATABLE READ): the deltas stay, which readers sum all the same.
    Returns the lines written (0 when it gave up)."""
    try:
        with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
            # as a build step: a judge epoch written meanwhile waits here, on judge_epochs, not on the
            # rollup, where every result write would queue behind it until the compaction is done
            conn.execute(text("LOCK TABLE judgeflow.judge_epochs IN SHARE MODE"))
            return conn.execute(text(
                f"""
                WITH hours AS (
                    SELECT DISTINCT metric, trace_hour FROM judgeflow.result_rollup WHERE NOT folded
                ), gone AS (
                    DELETE FROM judgeflow.result_rollup r USING hours h
                    WHERE r.metric = h.metric AND r.trace_hour = h.trace_hour RETURNING r.*
                ), kept AS (
                    INSERT INTO judgeflow.result_rollup ({_DIMS}, n, folded, written_at)
                    SELECT {_DIMS}, sum(n), true, max(written_at)
                    FROM gone GROUP BY {_DIMS}
                    HAVING sum(n) <> 0
                    RETURNING 1
                ) SELECT count(*) FROM kept
                """
            )).scalar_one()
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) in ("40001", "40P01"):
            return 0
        raise


@dataclass(frozen=True)
class BuildProgress:
    built_from: datetime
    oldest_hour: datetime | None
    hours_done: int
    hours_left: int
    lines: int

    @property
    def done(self) -> bool:
        return self.hours_left == 0


def window_index_covers(conn: Connection) -> bool:
    """Whether the window index holds source and trace id (a database upgraded
    with many results gets them from `judgeflow db rollup`, built concurrently)."""
    definition = conn.execute(text("SELECT indexdef FROM pg_indexes WHERE schemaname = 'judgeflow' "
                                   "AND indexname = :i"), {"i": WINDOW_INDEX}).scalar()
    return definition is not None and "source" in definition and "trace_id" in definition


def cover_window_index(engine: Engine) -> bool:
    """Rebuild the window index with source and trace id, without blocking
    writers (CREATE and DROP INDEX CONCURRENTLY, then a rename). Returns
    whether anything was done."""
    with engine.connect() as conn:
        if window_index_covers(conn):
            return False
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # an interrupted build leaves an invalid index behind: start it again
        conn.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS judgeflow.{_NEW_INDEX}"))
        conn.execute(text(COVERING.format(name=_NEW_INDEX)))
        conn.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS judgeflow.{WINDOW_INDEX}"))
        conn.execute(text(f"ALTER INDEX judgeflow.{_NEW_INDEX} RENAME TO {WINDOW_INDEX}"))
    return True


def present_metrics(conn: Connection) -> list[str]:
    """Every metric with a result (from the window index's first column: no scan)."""
    return list(conn.execute(text(_ENDS)).one().metrics or [])


def build_step(engine: Engine, metrics: list[str] | None = None, *, hours: int = BUILD_HOURS) -> BuildProgress:
    """Build the rollup for the ``hours`` trace hours just before where it is
    built from, newest first, of ``metrics`` (default: every metric with a
    result), in one short REPEATABLE READ transaction that takes no table lock
    writers wait for (writers go on; a judge epoch being recorded waits for the
    step; a clash with a compaction is retried)."""
    for attempt in range(5):
        try:
            with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
                # Before the snapshot: a judge epoch being written is committed first and seen, and
                # one written meanwhile waits here, on judge_epochs, not on the rollup (whose lock
                # it would take first, holding up every write behind it until this step is done).
                conn.execute(text("LOCK TABLE judgeflow.judge_epochs IN SHARE MODE"))
                conn.execute(text("SELECT 1 FROM judgeflow.rollup_state WHERE id = 1 FOR UPDATE")).one()
                current = rollup_state(conn)
                if current is None or current.built:
                    return BuildProgress(NEVER, None if current is None else current.oldest_hour, 0, 0, 0)
                metrics = metrics if metrics is not None else present_metrics(conn)
                lo = max(current.built_from - hours * HOUR, current.oldest_hour)
                span = [lo + i * HOUR for i in range(int((current.built_from - lo) / HOUR))]
                lines = conn.execute(text("SELECT judgeflow.rollup_recompute(CAST(:m AS text[]), "
                                          "CAST(:h AS timestamptz[]))"), {"m": metrics, "h": span}).scalar_one()
                done = lo <= current.oldest_hour
                conn.execute(text("UPDATE judgeflow.rollup_state SET built_from = "
                                  "CASE WHEN :done THEN '-infinity'::timestamptz ELSE :lo END, updated_at = now() "
                                  "WHERE id = 1"), {"done": done, "lo": lo})
                left = 0 if done else int((lo - current.oldest_hour) / HOUR)
                return BuildProgress(NEVER if done else lo, current.oldest_hour, len(span), left, int(lines))
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) not in ("40001", "40P01") or attempt == 4:
                raise
            time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def build(engine: Engine, metrics: list[str] | None = None, *, hours: int = BUILD_HOURS,
          progress: Callable[[BuildProgress], None] | None = None) -> BuildProgress:
    """Build every hour the rollup does not hold yet, a step at a time."""
    while True:
        step = build_step(engine, metrics, hours=hours)
        if progress is not None:
            progress(step)
        if step.done:
            return step


def start_over(engine: Engine) -> None:
    """Every hour is to be built again from the results (by :func:`build`);
    readers count the hours not built yet from the results meanwhile."""
    with engine.begin() as conn:
        conn.execute(text(
            f"""
            UPDATE judgeflow.rollup_state SET updated_at = now(),
                built_from = COALESCE(date_trunc('hour', e.newest AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                                      + interval '1 hour', '-infinity'),
                oldest_hour = date_trunc('hour', e.oldest AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
            FROM ({_ENDS}) e
            WHERE id = 1
            """
        ))


_COMPARE = f"""
    WITH raw AS (
        SELECT {_DIMS}, count(*) AS n FROM (
            SELECT r.source, r.metric, r.metric_version, {_MARK} AS epoch_mark,
                   date_trunc('hour', r.trace_created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS trace_hour,
                   r.status, r.passed, s.seg_key, s.seg_value, d.night AS s_night, d.stratum AS s_stratum,
                   {_PROB} AS s_prob
            FROM judgeflow.eval_results r LEFT JOIN judgeflow.sample_decisions d ON d.trace_id = r.trace_id
            {_SEGMENTS}
            WHERE r.trace_created_at >= :since
        ) x GROUP BY {_DIMS}
    ), kept AS (
        SELECT {_DIMS}, sum(n) AS n FROM judgeflow.result_rollup WHERE trace_hour >= :since
        GROUP BY {_DIMS} HAVING sum(n) <> 0
    )
    SELECT coalesce(raw.metric, kept.metric) AS metric, coalesce(raw.trace_hour, kept.trace_hour) AS trace_hour,
           coalesce(raw.seg_key, kept.seg_key) AS seg_key, coalesce(raw.n, 0) AS raw_n, coalesce(kept.n, 0) AS kept_n
    FROM raw FULL JOIN kept ON raw.source IS NOT DISTINCT FROM kept.source AND raw.metric = kept.metric
        AND raw.metric_version IS NOT DISTINCT FROM kept.metric_version
        AND raw.epoch_mark IS NOT DISTINCT FROM kept.epoch_mark AND raw.trace_hour = kept.trace_hour
        AND raw.status = kept.status AND raw.passed IS NOT DISTINCT FROM kept.passed
        AND raw.seg_key = kept.seg_key AND raw.seg_value = kept.seg_value
        AND raw.s_night IS NOT DISTINCT FROM kept.s_night AND raw.s_stratum IS NOT DISTINCT FROM kept.s_stratum
        AND raw.s_prob = kept.s_prob
    WHERE coalesce(raw.n, 0) <> coalesce(kept.n, 0)
    ORDER BY 2, 1, 3
"""


def differences(conn: Connection) -> list[tuple[str, datetime, str, int, int]]:
    """The rollup's lines (over the hours it is built for) that differ from the
    results counted now, in any dimension, the sample class and the epoch mark
    included: (metric, trace hour, segment key, results, rollup's count).
    Empty: the rollup is exact. Reads every result: for `db check --full`."""
    state = rollup_state(conn)
    if state is None:
        return []
    # one statement, one snapshot: a write committed meanwhile is not a difference
    rows = conn.execute(text(_COMPARE), {"since": state.built_from}).all()
    return [(r.metric, r.trace_hour, r.seg_key, int(r.raw_n), int(r.kept_n)) for r in rows]


def exploding_keys(conn: Connection, *, limit: int = EXPLODING_VALUES) -> list[tuple[str, int]]:
    """Segment keys with more than ``limit`` distinct values in the rollup, with
    their count (read from its lines, not the results)."""
    rows = conn.execute(text(
        "SELECT seg_key, count(DISTINCT seg_value) FROM judgeflow.result_rollup WHERE seg_key <> '' "
        "GROUP BY 1 HAVING count(DISTINCT seg_value) > :limit ORDER BY 2 DESC"), {"limit": limit}).all()
    return [(k, int(n)) for k, n in rows]
