"""Database set-up tasks."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.db import migrate
from judgeflow.db.engine import engine_for
from judgeflow.db.result_sources import adopt_configured_source
from judgeflow.config.settings import Settings

log = logging.getLogger("judgeflow.sources")


# retries: the task level, for the database (migrations are transactional and idempotent)
@task(name="ensure-schema", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=3)
def ensure_schema(settings: Settings) -> list[str]:
    """Bring judgeflow's own tables to the current revision (a no-op when they are) and
    record the configured source in them (judgeflow/db/result_sources.py). Returns what
    a run's summary says about it: other sources' results in this database, a source
    switch, results from before sources were recorded assigned to this one."""
    engine = engine_for(settings)
    migrate.upgrade(engine)
    notes = adopt_configured_source(engine, settings).notes()
    for note in notes:
        log.warning(note)
    return notes
