"""Database set-up tasks."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.db import migrate
from judgeflow.db.engine import engine_for
from judgeflow.settings import Settings


@task(name="ensure-schema", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=3)
def ensure_schema(settings: Settings) -> str:
    """Bring judgeflow's own tables to the current revision (a no-op when they are)."""
    return migrate.upgrade(engine_for(settings))
