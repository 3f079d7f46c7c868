"""Counting the source rows a run cannot use, so the run says so."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from datetime import datetime

from judgeflow.db.engine import source_engine
from judgeflow.sources.trace_source import trace_source
from judgeflow.sources.unusable import UnusableRows, describe
from judgeflow.config.settings import Settings

log = logging.getLogger("judgeflow.source")


# retries=0: a report, never fails (None when the rows could not be counted)
@task(name="count-unusable-rows", cache_policy=NO_CACHE, persist_result=False, retries=0)
def count_unusable_rows(settings: Settings, lo: datetime | None = None, full: bool = True) -> UnusableRows | None:
    """NULL ids, NULL created_at and duplicate ids in what the run reads: the
    rows created at or after ``lo`` (its window: through the created_at index,
    NULL times in none), or the whole source (``full``: a run without a
    watermark reads it all anyway), logged with the SQL that lists them. Never
    fails the run: None when they could not be counted (the run scores what it
    can either way)."""
    source = trace_source(settings)
    try:
        with source_engine(settings).begin() as conn:
            rows = source.unusable(conn, lo=lo, full=full, timeout_s=60.0)
    except Exception as error:  # a report, not a precondition
        log.warning("could not count unusable rows of %s: %s", source.display, error)
        return None
    for line in describe(source, rows):
        log.warning(line)
    return rows
