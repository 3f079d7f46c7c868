"""`judgeflow score --plan`: the night's sample plan, printed, with no judge
call and nothing recorded."""

from __future__ import annotations

from datetime import datetime

from judgeflow.config.settings import Settings


def plan_text_now(settings: Settings, *, since: datetime | None, until: datetime | None,
                  sample_rate: float) -> str:
    from judgeflow.db import migrate
    from judgeflow.db.engine import engine_for
    from judgeflow.sampling.table import plan_text
    from judgeflow.tasks.claims import plan_source_reads
    from judgeflow.tasks.sampling import night_plan
    from judgeflow.metrics.registry import metric_names

    migrate.upgrade(engine_for(settings))
    metrics = list(metric_names())
    plan = plan_source_reads.fn(settings, metrics, sample_rate=sample_rate,
                                ranged=since is not None or until is not None)
    night = night_plan(settings, plan, metrics, since=since, until=until, sample_rate=sample_rate, record=False,
                       flow_run_id=None)
    return plan_text(night)
