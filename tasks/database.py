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


@task(name="record-result-source", cache_policy=NO_CACHE, persist_result=False)
def record_result_source(settings: Settings) -> list[str]:
    """Record the configured source in the results database (judgeflow/db/sources/results.py):
    the notes a run's summary gives about other sources' results, or a source switch."""
    import logging

    from judgeflow.db.sources.results import settle_configured_source

    notes = settle_configured_source(engine_for(settings), settings).notes()
    for note in notes:
        logging.getLogger("judgeflow.sources").warning(note)
    return notes
