"""The figures of one rule over its rolling window, straight from eval_results.

The window is by the trace's ``created_at`` (``eval_results.trace_created_at``):
results whose trace was created at or after ``now - window``. Results without
a trace time are outside every window.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import Connection, and_, func, select

from judgeflow.alerts.rules import Rule
from judgeflow.db.schema import eval_results as r
from judgeflow.tasks.work import METRIC_NAMES

WORST_LIMIT = 5
# reasons are the judge's short explanations; cut them so a notification never
# carries much of a trace's text
REASON_CHARS = 300


@dataclass(frozen=True)
class WorstTrace:
    trace_id: str
    metric: str
    score: float | None
    reason: str | None
    trace_created_at: datetime | None

    def as_json(self) -> dict:
        data = asdict(self)
        data["trace_created_at"] = iso_utc(self.trace_created_at)
        return data


@dataclass(frozen=True)
class Figures:
    value: float | None  # the rate; None when the window holds no sample
    violations: int  # numerator: not-passed (or failed) results
    sample_size: int  # denominator
    failed: int  # failed scorings in the window (for a not-passed rate: beside it)
    worst: list[WorstTrace]
    evaluated_at: datetime
    window_start: datetime


def iso_utc(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a 'Z', as every time in a notification is written."""
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z") if value else None


def _cut(text: str | None) -> str | None:
    if text is None:
        return None
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def compute_figures(conn: Connection, rule: Rule, *, now: datetime | None = None) -> Figures:
    """The rule's rate, sample size, failed count and worst traces, as of ``now``
    (default: the database's ``now()``)."""
    if now is None:
        now = conn.execute(select(func.now())).scalar_one()
    start = now - timedelta(seconds=rule.window_s)
    # Always a condition on metric: eval_results' index is (metric, trace_created_at),
    # and a window over every metric would otherwise read the whole table.
    metrics = (rule.metric,) if rule.metric is not None else METRIC_NAMES
    in_window = and_(r.c.metric.in_(metrics), r.c.trace_created_at >= start)

    scored = r.c.status == "scored"
    failed = r.c.status == "failed"
    if rule.kind == "not_passed_rate":
        bad = and_(scored, r.c.passed.is_not(True))
        counted = scored
    elif rule.kind == "failure_rate":
        bad = failed
        counted = scored | failed
    else:  # pragma: no cover - RuleKind is closed
        raise ValueError(f"unknown rule kind {rule.kind!r}")

    row = conn.execute(
        select(
            func.count().filter(counted).label("samples"),
            func.count().filter(bad).label("bad"),
            func.count().filter(failed).label("failed"),
        ).where(in_window)
    ).one()

    if rule.kind == "not_passed_rate":
        reason = r.c.reason
        order = (r.c.score.desc().nulls_last(), r.c.trace_created_at.desc(), r.c.trace_id)
    else:
        reason = func.concat_ws(": ", r.c.error_kind, r.c.error)
        order = (r.c.scored_at.desc(), r.c.trace_id)
    worst = [
        WorstTrace(w.trace_id, w.metric, w.score, _cut(w.reason), w.trace_created_at)
        for w in conn.execute(
            select(r.c.trace_id, r.c.metric, r.c.score, reason.label("reason"), r.c.trace_created_at)
            .where(in_window, bad)
            .order_by(*order)
            .limit(WORST_LIMIT)
        )
    ]
    samples, violations = int(row.samples), int(row.bad)
    return Figures(
        value=(violations / samples) if samples else None,
        violations=violations,
        sample_size=samples,
        failed=int(row.failed),
        worst=worst,
        evaluated_at=now,
        window_start=start,
    )
