"""Writing scores back to Phoenix (judgeflow/phoenix/outbox.py), after a run has stored its results."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.db.engine import engine_for
from judgeflow.sources.identity import result_source
from judgeflow.phoenix.outbox import Sync, sync_phoenix
from judgeflow.config.settings import Settings

log = logging.getLogger("judgeflow.phoenix")


def write_back(settings: Settings, *, everything: bool = False, repair: bool = False) -> Sync:
    """The configured source's unwritten scores, written to Phoenix: those due, or
    all of them (``everything``), or every scored one again (``repair``). Never
    raises: a failure is the outcome's note."""
    api_key = settings.phoenix_api_key.get_secret_value() if settings.phoenix_api_key else None
    try:
        outcome = sync_phoenix(engine_for(settings), result_source(settings), settings.phoenix_url, api_key,
                               everything=everything, repair=repair)
    except Exception as error:  # a report, never a reason to fail the run
        outcome = Sync(stop=f"could not read the unwritten scores: {type(error).__name__}: {error}")
    (log.warning if outcome.failed or outcome.stop else log.info)(outcome.note)
    return outcome


# retries=0: never fails; what Phoenix did not get waits in its outbox for the next run
@task(name="write-scores-to-phoenix", cache_policy=NO_CACHE, persist_result=False, retries=0)
def write_scores_to_phoenix(settings: Settings, flow_run_id: str | None = None) -> Sync:
    """Every scored result Phoenix does not have yet and that is due (this run's, and
    any left by an earlier run, a write-back turned on later, or Phoenix being down),
    as span annotations. Never fails the run."""
    return write_back(settings)
