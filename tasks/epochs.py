"""Recording the judge epoch a scoring run starts (see judgeflow.db.epochs)."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgeflow.db.engine import engine_for
from judgeflow.db.epochs import configured, record_epochs
from judgeflow.config.settings import Settings
from judgeflow.sources.identity import result_source

log = logging.getLogger("judgeflow.db.epochs")


# retries: the task level, for the database (one transaction; a retry records nothing twice)
@task(name="record-judge-epochs", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=1)
def record_judge_epochs(settings: Settings, metrics: list[str], flow_run_id: str | None = None) -> list[str]:
    """Record a new judge epoch of the configured source for each metric this run
    scores with a (metric version, judge model) other than the one in force for
    that source; one line per epoch started, for the run summary. A retry records
    nothing twice (the second attempt finds the epoch in force)."""
    with engine_for(settings).begin() as conn:
        started = record_epochs(conn, result_source(settings), configured(settings.judge_model, metrics),
                                flow_run_id=flow_run_id)
    for s in started:  # info, not a warning: the run summary says a change once ("Judge changed.")
        log.info("%s", s.describe())
    return [s.describe() for s in started if s.previous is not None]
