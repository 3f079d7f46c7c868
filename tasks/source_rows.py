"""Counting the source rows a run cannot use, so the run says so."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.db.engine import engine_for
from judgeflow.db.source import SourceTable
from judgeflow.db.unusable import UnusableRows, count_unusable, describe
from judgeflow.settings import Settings

log = logging.getLogger("judgeflow.source")


@task(name="count-unusable-rows", cache_policy=NO_CACHE, persist_result=False)
def count_unusable_rows(settings: Settings) -> UnusableRows | None:
    """NULL ids, NULL created_at and duplicate ids in the source, logged with
    the SQL that lists them. Never fails the run: None when they could not be
    counted (the run scores what it can either way)."""
    source = SourceTable.parse(settings.traces_table)
    try:
        with engine_for(settings).begin() as conn:
            rows = count_unusable(conn, source)
    except Exception as error:  # a report, not a precondition
        log.warning("could not count unusable rows of %s: %s", source.display, error)
        return None
    for line in describe(source, rows):
        log.warning(line)
    return rows
