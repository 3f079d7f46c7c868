"""Writing a run's scores back to Phoenix (judgeflow/phoenix_annotations.py), after they are stored."""

from __future__ import annotations

import logging

from prefect import task
from prefect.cache_policies import NO_CACHE
from sqlalchemy import text

from judgeflow.db.engine import engine_for
from judgeflow.phoenix_annotations import WriteBack, write_annotations
from judgeflow.settings import Settings

log = logging.getLogger("judgeflow.phoenix")


@task(name="write-scores-to-phoenix", cache_policy=NO_CACHE, persist_result=False)
def write_scores_to_phoenix(settings: Settings, flow_run_id: str | None) -> WriteBack:
    """The scored results this run stored, as span annotations in Phoenix. Never fails the
    run: what could not be written is counted and logged."""
    try:
        with engine_for(settings).connect() as conn:
            results = conn.execute(
                text(
                    "SELECT trace_id, metric, score, passed, reason, threshold, judge_model, metric_version, "
                    "flow_run_id FROM judgeflow.eval_results WHERE flow_run_id = :run AND status = 'scored'"
                ),
                {"run": flow_run_id},
            ).mappings().all()
    except Exception as error:  # a report, never a reason to fail the run
        log.warning("could not read this run's scores for Phoenix: %s", error)
        return WriteBack(failed=0, errors=[f"could not read the scores: {error}"])
    api_key = settings.phoenix_api_key.get_secret_value() if settings.phoenix_api_key else None
    outcome = write_annotations(settings.phoenix_url, [dict(r) for r in results], api_key=api_key)
    (log.warning if outcome.failed else log.info)(outcome.note)
    return outcome
