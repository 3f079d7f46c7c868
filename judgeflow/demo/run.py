"""`judgeflow demo`: the whole product on one machine with nothing set up.

Embedded PostgreSQL under JUDGEFLOW_HOME, in a database of the demo's own
(``judgeflow_demo``: the demo's traces, metrics' results and alerts never meet
a user's, whatever their metrics are named), its ``llm_traces`` table
filled with the demo traces, the scoring flow on Prefect's local server, the
alert rules, and a readable summary. Idempotent: a second run loads nothing
new and scores nothing twice; ``reset`` starts over.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import DateTime, Text, bindparam, column, table
from sqlalchemy.dialects.postgresql import JSONB, insert

from judgeflow.db.embedded import EmbeddedPostgres
from judgeflow.db.engine import dispose_engines, engine_for
from judgeflow.sources.table import CREATE_DEFAULT_TABLE
from judgeflow.demo import load_demo_traces
from judgeflow.config.settings import Settings
from judgeflow.run.metric_door import open_metrics

# The columns of CREATE_DEFAULT_TABLE the demo fills. none_as_null: a trace
# without context stores SQL NULL (no context), not the JSON value null.
_LLM_TRACES = table(
    "llm_traces",
    column("id", Text),
    column("created_at", DateTime(timezone=True)),
    column("input", Text),
    column("output", Text),
    column("context", JSONB(none_as_null=True)),
    column("metadata", JSONB(none_as_null=True)),
    schema="public",
)


DEMO_METRICS = Path(__file__).with_name("metrics.toml")
# the embedded cluster's database the demo works in (JUDGEFLOW_EMBEDDED_DATABASE's default is the user's)
DEMO_DATABASE = "judgeflow_demo"

OFFLINE_NOTE = (
    "offline (no judge configured: a trained profanity classifier and a context-overlap check; "
    "set JUDGEFLOW_JUDGE_MODEL for an LLM judge)"
)


def demo_settings(settings: Settings) -> tuple[Settings, str]:
    """The demo's settings and a note on its judge: ``settings`` with the
    demo's own database of the embedded cluster, and the offline judge unless a judge model was
    configured (JUDGEFLOW_JUDGE_MODEL, in the environment or ``.env``)."""
    update: dict = {"database_url": None, "embedded_database": DEMO_DATABASE}
    note = f"{settings.judge_model} (JUDGEFLOW_JUDGE_MODEL)"
    if "judge_model" not in settings.model_fields_set:
        update["judge_model"], note = "offline", OFFLINE_NOTE
    if settings.metrics_file is None:
        # a metric of a file beside the built-ins; validated again so its settings are built
        values = {**settings.model_dump(exclude={"metric_settings"}), **update, "metrics_file": DEMO_METRICS}
        demo = Settings.model_validate(values)
        open_metrics(DEMO_METRICS)  # the demo's metrics file served through the door, as its command's own would be
        return demo, note
    return settings.model_copy(update=update), note


def reset(settings: Settings) -> None:
    """Drop the demo's database (``settings`` are the demo's): the embedded cluster, its other
    databases and the local Prefect server, which a user's own work may share, are left alone."""
    dispose_engines()  # no pooled connection of this process holds the database
    EmbeddedPostgres.for_settings(settings).drop_database()


def load_traces(settings: Settings, now: datetime | None = None) -> int:
    """Create the default source table and insert the demo traces that are not
    there yet; returns how many were inserted.

    The table is ``public.llm_traces`` (the default ``JUDGEFLOW_TRACES_TABLE``
    resolves there). Counted from ``RETURNING id``: the rowcount of an
    executemany is up to the driver (-1, the last batch's, or the sum)."""
    rows = load_demo_traces(now or datetime.now(timezone.utc))
    statement = (
        insert(_LLM_TRACES)
        .values({name: bindparam(name) for name in _LLM_TRACES.c.keys()})
        .on_conflict_do_nothing(index_elements=["id"])
        .returning(_LLM_TRACES.c.id)
    )
    with engine_for(settings).begin() as conn:
        # The embedded role is called judgeflow, so once the first run has
        # created the judgeflow schema, "$user" puts it first on the search
        # path: an unqualified CREATE would make a second, empty llm_traces
        # there on every later run (and count all the traces as new again).
        conn.exec_driver_sql("SET LOCAL search_path TO public")
        conn.exec_driver_sql(CREATE_DEFAULT_TABLE)
        inserted = conn.execute(statement, rows).scalars().all()
        return len(inserted)


_TERMINAL = ["COMPLETED", "FAILED", "CRASHED", "CANCELLED"]


def wait_for_prefect_records(flow_run_id: str, *, timeout_s: float = 60.0) -> bool:
    """Wait until the Prefect server has recorded the run's task runs, so the
    link the demo prints shows the whole run at once.

    The server persists task runs from events, in the background and a little
    behind the run. Done when every recorded task run is finished and their
    count holds still for a second. Returns False on timeout (the results in
    PostgreSQL are complete either way, and the server keeps recording)."""
    import time

    from prefect.client.orchestration import get_client

    def count(client, states: list[str] | None = None) -> int:
        body: dict = {"flow_runs": {"id": {"any_": [flow_run_id]}}}
        if states:
            body["task_runs"] = {"state": {"type": {"any_": states}}}
        response = client.request("POST", "/task_runs/count", json=body)
        response.raise_for_status()
        return int(response.json())

    deadline = time.monotonic() + timeout_s
    last = -1
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            total, finished = count(client), count(client, _TERMINAL)
            if total > 0 and finished == total and total == last:
                return True
            last = total if finished == total else -1
            time.sleep(1.0)
    return False
