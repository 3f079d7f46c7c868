"""Judge epochs: which (metric, metric version, judge model) is in force for a source, and since when.

A **judge epoch** is a metric's (``metric_version``, judge model) from the
moment a scoring run of a source started using it. A new judge model and an
edited prompt (a new ``metric_version``) both start one. Epochs are recorded in
``judgeflow.judge_epochs`` by the scoring run that first uses the combination
(task ``record-judge-epochs``); the latest row of a (source, metric) is the epoch
in force. Each source keeps its own (migration 14_epochs_per_source.py): two sources judged by
different judges in one results database never start epochs for each other.

A result belongs to the epoch in force when it was written after the epoch
started with the epoch's metric version (a failed scoring has no version: its
time decides). The judge model is not matched on the result: a provider's reply
names its own model (``gpt-4o`` answers as ``gpt-4o-2024-08-06``), so the
result's ``judge_model`` column cannot be compared with the configured one;
the epoch's start time separates the models instead.

The first epoch recorded for a metric (a database scored before epochs
existed) starts at the first result of the current metric version written
after the last result of another version, so upgrading judgeflow does not
throw away a baseline; it cannot tell judge models apart from the results
alone, and assumes the judge was not changed by the same upgrade.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable

from sqlalchemy import Connection, text

from judgeflow.db.schema import SCHEMA
from judgeflow.config.judge_models import metric_judge_model
from judgeflow.metrics.registry import current_versions, spec_of

# results stored before sources were recorded count as the configured source's
# (judgeflow/sources/identity.py of_source)
_OF_SOURCE = "(source = :source OR source IS NULL)"

# fixed key of the advisory lock that serialises epoch recording
_LOCK_KEY = 0x6A65706F


@dataclass(frozen=True)
class Epoch:
    metric: str
    metric_version: str
    judge_model: str
    started_at: datetime
    id: int | None = None
    flow_run_id: str | None = None

    @property
    def combination(self) -> tuple[str, str]:
        return self.metric_version, self.judge_model

    def describe(self) -> str:
        return f"{self.metric} {self.metric_version} judged by {self.judge_model} since {when(self.started_at)}"

    def as_json(self) -> dict:
        return {
            "metric": self.metric, "metric_version": self.metric_version, "judge_model": self.judge_model,
            "started_at": when(self.started_at), "flow_run_id": self.flow_run_id,
        }


@dataclass(frozen=True)
class Started:
    """An epoch a scoring run started, and the one it replaced (None: the first)."""

    epoch: Epoch
    previous: Epoch | None

    def describe(self) -> str:
        if self.previous is None:
            return f"first judge epoch recorded: {self.epoch.describe()}"
        changed = []
        if self.previous.metric_version != self.epoch.metric_version:
            changed.append(f"metric version {self.previous.metric_version} -> {self.epoch.metric_version}")
        if self.previous.judge_model != self.epoch.judge_model:
            changed.append(f"judge model {self.previous.judge_model} -> {self.epoch.judge_model}")
        return (
            f"new judge epoch for {self.epoch.metric} from this run ({'; '.join(changed)}): alert rules count only "
            "its results and report insufficient data until they have enough; "
            "`judgeflow backfill --rescore` over the baseline period gives it a baseline at once"
        )


def when(value: datetime | None) -> str:
    """A time as the CLI and reports write it: UTC, to the second."""
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def configured(judge_model: str, metrics: Iterable[str], *, own_models: bool = True) -> dict[str, tuple[str, str]]:
    """``{metric: (metric_version, judge model)}`` a run with ``judge_model`` scores with: a metric's
    own judge model where it has one (``own_models``; a shadow's candidate judges every metric)."""
    versions = current_versions()
    models = {m: metric_judge_model(judge_model, spec_of(m).judge_model) for m in metrics}
    return {m: (versions[m], models[m] if own_models else judge_model) for m in models}


def _table_exists(conn: Connection) -> bool:
    return bool(conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"{SCHEMA}.judge_epochs"}).scalar())


def _epoch(row) -> Epoch:
    return Epoch(
        metric=row.metric, metric_version=row.metric_version, judge_model=row.judge_model,
        started_at=row.started_at, id=row.id, flow_run_id=row.flow_run_id,
    )


def current_epochs(conn: Connection, source: str | None) -> dict[str, Epoch]:
    """The epoch in force per metric for ``source`` (metrics it never scored since epochs exist: absent)."""
    if not _table_exists(conn):
        return {}
    rows = conn.execute(text(
        f"""
        SELECT DISTINCT ON (metric) id, metric, metric_version, judge_model, started_at, flow_run_id
        FROM {SCHEMA}.judge_epochs WHERE source = :source ORDER BY metric, started_at DESC, id DESC
        """
    ), {"source": source or ""})
    return {r.metric: _epoch(r) for r in rows}


def epoch_history(conn: Connection, source: str | None, *, since: datetime | None = None) -> list[Epoch]:
    """Every epoch recorded for ``source``, oldest first; with ``since``, those in
    force at or after it (the one in force at ``since`` included)."""
    if not _table_exists(conn):
        return []
    rows = list(conn.execute(text(
        f"SELECT id, metric, metric_version, judge_model, started_at, flow_run_id FROM {SCHEMA}.judge_epochs "
        "WHERE source = :source ORDER BY started_at, id"
    ), {"source": source or ""}))
    epochs = [_epoch(r) for r in rows]
    if since is None:
        return epochs
    kept = []
    for i, e in enumerate(epochs):
        later = [x for x in epochs[i + 1:] if x.metric == e.metric]
        if e.started_at >= since or not later or later[0].started_at > since:
            kept.append(e)
    return kept


def _first_start(conn: Connection, source: str, metric: str, version: str) -> datetime | None:
    """Where a source's first recorded epoch of a metric starts: its results of
    ``version`` written after its last result of another version (None: there are none)."""
    return conn.execute(text(
        f"""
        SELECT min(scored_at) FROM {SCHEMA}.eval_results
        WHERE metric = :metric AND metric_version = :version AND {_OF_SOURCE}
          AND scored_at >= coalesce((
              SELECT max(scored_at) FROM {SCHEMA}.eval_results
              WHERE metric = :metric AND metric_version IS NOT NULL AND metric_version <> :version
                AND {_OF_SOURCE}
          ), '-infinity')
        """
    ), {"metric": metric, "version": version, "source": source}).scalar()


def adopt_epochs(conn: Connection, source: str) -> int:
    """Epochs no source could be traced to (recorded before epochs had a source,
    migration 14_epochs_per_source.py) become ``source``'s for the metrics it has none of."""
    if not _table_exists(conn):
        return 0
    return conn.execute(text(
        f"""
        UPDATE {SCHEMA}.judge_epochs e SET source = :source
        WHERE e.source = '' AND NOT EXISTS (
            SELECT 1 FROM {SCHEMA}.judge_epochs b WHERE b.source = :source AND b.metric = e.metric)
        """
    ), {"source": source}).rowcount


def record_epochs(
    conn: Connection, source: str, combinations: dict[str, tuple[str, str]], *, flow_run_id: str | None = None
) -> list[Started]:
    """Record an epoch of ``source`` for each metric whose ``(metric_version,
    judge_model)`` differs from the one in force for it (or that has none yet).
    Serialised by an advisory lock, so two runs starting together record a
    change once. Returns the epochs started; the caller's transaction commits them."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
    # An epoch written fires the rollup's recompute of the hours scored since it starts (usually none);
    # over millions of results the planner's estimates would JIT-compile that statement while every
    # result write waits behind the epoch's lock on the rollup. This transaction only.
    conn.execute(text("SET LOCAL jit = off"))
    now = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
    in_force = current_epochs(conn, source)
    started: list[Started] = []
    for metric, (version, model) in sorted(combinations.items()):
        previous = in_force.get(metric)
        if previous is not None and previous.combination == (version, model):
            continue
        start = now
        if previous is None:
            start = _first_start(conn, source, metric, version) or now
        row = conn.execute(text(
            f"""
            INSERT INTO {SCHEMA}.judge_epochs
                (source, metric, metric_version, judge_model, started_at, recorded_at, flow_run_id)
            VALUES (:source, :metric, :version, :model, :start, :now, :run)
            RETURNING id, metric, metric_version, judge_model, started_at, flow_run_id
            """
        ), {"source": source, "metric": metric, "version": version, "model": model, "start": start, "now": now,
            "run": flow_run_id}).one()
        started.append(Started(_epoch(row), previous))
    return started


def in_epoch_sql(epochs: dict[str, Epoch], metrics: Iterable[str]) -> tuple[str, dict]:
    """A condition over eval_results' columns: the result belongs to its
    metric's epoch in force (always true for a metric without an epoch)."""
    branches, params = [], {}
    for i, metric in enumerate(metrics):
        epoch = epochs.get(metric)
        if epoch is None:
            continue
        branches.append(
            f"WHEN :ep_metric_{i} THEN (scored_at >= :ep_start_{i}"
            f" AND (metric_version = :ep_version_{i} OR metric_version IS NULL))"
        )
        params.update({f"ep_metric_{i}": metric, f"ep_start_{i}": epoch.started_at,
                       f"ep_version_{i}": epoch.metric_version})
    if not branches:
        return "TRUE", {}
    return f"(CASE metric {' '.join(branches)} ELSE TRUE END)", params


def latest_start(epochs: dict[str, Epoch], metrics: Iterable[str]) -> datetime | None:
    """When the most recent of these metrics' epochs started."""
    starts = [epochs[m].started_at for m in metrics if m in epochs]
    return max(starts) if starts else None
