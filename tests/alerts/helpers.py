"""Shared by the alert tests: settings for a test database, a migrated
engine, and eval_results rows with chosen trace times and outcomes."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.db.schema import eval_results
from judgeflow.config.settings import Settings

_ids = itertools.count()

FAST_DELIVERY = dict(
    alert_webhook_timeout_s=2.0,
    alert_webhook_retries=3,
    alert_webhook_backoff_s=0.01,
    alert_webhook_backoff_max_s=0.05,
    alert_redelivery_backoff_s=0.0,  # every evaluation retries what is undelivered
    alert_prefect_events=False,
)


def make_settings(database_url: str, **overrides) -> Settings:
    """Settings for tests: never reads a .env; quick retries; no Prefect events
    unless asked for."""
    values = dict(database_url=database_url, alert_min_samples=10, **FAST_DELIVERY)
    values.update(overrides)
    return Settings(_env_file=None, **values)


def migrated(engine: sa.Engine) -> sa.Engine:
    migrate.upgrade(engine)
    return engine


def add_results(
    engine: sa.Engine,
    metric: str = "toxicity",
    *,
    passed: int = 0,
    not_passed: int = 0,
    failed: int = 0,
    skipped: int = 0,
    age: timedelta = timedelta(hours=1),
    reason: str = "insulting language",
    scores: list[float] | None = None,
    segment: dict[str, str] | None = None,
) -> list[str]:
    """Insert results for new traces created ``age`` ago; returns the not-passed trace ids."""
    created = datetime.now(timezone.utc) - age
    rows, bad_ids = [], []

    def row(status, *, passed_=None, score=None, reason_=None, error=None):
        trace_id = f"trace-{next(_ids):06d}"
        rows.append(dict(
            trace_id=trace_id, metric=metric, status=status, score=score, passed=passed_, threshold=0.5,
            reason=reason_, error=error, error_kind="judge_error" if error else None,
            trace_created_at=created, details={}, segment=segment or {},
        ))
        return trace_id

    for _ in range(passed):
        row("scored", passed_=True, score=0.0, reason_="fine")
    for i in range(not_passed):
        score = scores[i] if scores and i < len(scores) else 0.9
        bad_ids.append(row("scored", passed_=False, score=score, reason_=reason))
    for _ in range(failed):
        row("failed", error="judge timed out")
    for _ in range(skipped):
        row("skipped")
    if rows:
        with engine.begin() as conn:
            conn.execute(eval_results.insert(), rows)
    return bad_ids


def clear_results(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(eval_results.delete())


def alert_row(engine: sa.Engine, rule: str = "toxicity_rate", segment_key: str = ""):
    """The rule's row overall ('' segment) or for one segment ('app=b')."""
    from judgeflow.db.alert_tables import alerts

    with engine.connect() as conn:
        return conn.execute(
            sa.select(alerts).where(alerts.c.rule == rule, alerts.c.segment_key == segment_key)
        ).one_or_none()


def alert_events_rows(engine: sa.Engine, rule: str | None = None) -> list:
    from judgeflow.db.alert_tables import alert_events

    query = sa.select(alert_events).order_by(alert_events.c.id)
    if rule:
        query = query.where(alert_events.c.rule == rule)
    with engine.connect() as conn:
        return list(conn.execute(query))
