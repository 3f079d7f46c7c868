"""``calibrate-judge``: the judge against human labels, reported as Prefect artifacts."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from judgeflow.calibration.labelled import load_labelled, only_metrics, render, table
from judgeflow.run.entry import run_settings
from judgeflow.tasks.calibration import calibration_policy, judge_labelled_items
from judgeflow.tasks.database import ensure_schema
from judgeflow.tasks.preparation import prepare_metrics, unprepared

REPORT_KEY = "judgeflow-calibration-report"
TABLE_KEY = "judgeflow-calibration"


@flow(name="calibrate-judge")
def calibrate_judge(path: str, budget_usd: float | None = None, metrics: list[str] | None = None) -> str:
    """Run the configured judge over the labelled set at ``path`` (JSON Lines,
    see :mod:`judgeflow.calibration.labelled`) and publish its agreement with the labels;
    with ``budget_usd``, pairs that do not fit it are not judged; with ``metrics``,
    only those metrics' labels are judged."""
    settings = run_settings()
    items = only_metrics(load_labelled(path), metrics)
    policy = calibration_policy(settings, budget_usd)
    labelled = list(dict.fromkeys(metric for item in items for metric in item.labels))
    if unprepared(labelled):  # its steps are the ones runs score with: stored, or written once now
        ensure_schema(settings)
        prepare_metrics(settings, labelled, policy)
    reports = judge_labelled_items(settings, items, policy)
    markdown = render(reports, judge_model=settings.judge_model, source=path)
    create_table_artifact(key=TABLE_KEY, table=table(reports), description="judge vs human labels")
    create_markdown_artifact(key=REPORT_KEY, markdown=markdown, description="judge calibration report")
    return markdown
