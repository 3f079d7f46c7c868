"""No secret reaches the Prefect API: a scoring run with distinctive secrets
(judge API key, credentials in the judge base URL's userinfo and query,
database password, webhook URL and signing secret), on the
real Prefect server, PostgreSQL and judge server, with judge failures and a
failing webhook so the error paths log too; then everything the API holds
about the run (flow run with its parameters, task runs, logs, artifacts,
events) is read back and searched for the secrets."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from judgeflow.flows.scoring import score_new_traces
from judgeflow.tasks.alerting import ALERT_STATE_KEY
from judgeflow.tasks.reporting import PROGRESS_KEY, REPORT_KEY, SUMMARY_KEY
from tests.support.traces import insert_traces, scripted_trace
from tests.support.webhook_receiver import WebhookReceiver


def canaries() -> dict[str, str]:
    tag = uuid.uuid4().hex[:12]
    return {
        "api_key": f"sk-canary-apikey-{tag}",
        "db_password": f"canary-dbpw-{tag}",
        "webhook_path": f"/canary-hookpath-{tag}",
        "webhook_secret": f"whsec-canary-{tag}",
        "base_user": f"canary-baseuser-{tag}",
        "base_password": f"canary-basepw-{tag}",
        "base_query_key": f"canary-basequery-{tag}",
    }


def base_url_with_credentials(judge_url: str, secrets: dict[str, str]) -> str:
    """The judge server's URL carrying credentials in its userinfo (httpx sends
    them as Basic auth, in place of the key's Bearer) and in an ``api-key``
    query parameter (the OpenAI client then requests a mangled path: every
    judge call fails, and its error is logged and stored)."""
    host = judge_url.removeprefix("http://")
    return f"http://{secrets['base_user']}:{secrets['base_password']}@{host}?api-key={secrets['base_query_key']}"


def eval_results_text(db) -> str:
    with db.connect() as conn:
        rows = conn.execute(text("SELECT * FROM judgeflow.eval_results")).mappings().all()
    assert rows
    return json.dumps([dict(r) for r in rows], default=str)


def recent_traces(n: int) -> list[dict]:
    """Scripted traces inside the alert window, and one the judge rejects."""
    created = datetime.now(timezone.utc) - timedelta(hours=1)
    rows = [{**scripted_trace(i)[0], "created_at": created} for i in range(n)]
    rows.append({"id": "tr-rejected", "output": "Rejected. [judge-fail:400]", "created_at": created})
    return rows


def everything_about(flow_run_id: str) -> tuple[str, dict]:
    """All the API holds about one flow run, as one JSON text, and what was found."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId,
    )
    from prefect.client.schemas.sorting import LogSort, TaskRunSort
    from prefect.events.filters import EventFilter, EventOccurredFilter
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    runs = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(flow_run_id)
        # every argument given: the 3.8.8 server refuses the client's nulls
        task_runs = client.read_task_runs(
            flow_run_filter=runs, sort=TaskRunSort.EXPECTED_START_TIME_ASC, limit=200, offset=0
        )
        logs, offset = [], 0
        while page := client.read_logs(
            LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200, offset=offset,
            sort=LogSort.TIMESTAMP_ASC,
        ):
            logs += page
            offset += len(page)
        # raw: read_artifacts sends a task-run filter, which drops the flow run's own artifacts
        artifacts = client.request(
            "POST", "/artifacts/filter",
            json={"flow_runs": {"id": {"any_": [str(flow_run_id)]}}, "limit": 200, "offset": 0, "sort": "CREATED_DESC"},
        ).json()
        page = client.read_events(
            EventFilter(occurred=EventOccurredFilter(since=flow_run.created - timedelta(minutes=1))), limit=50
        )
        events = list(page.events)
        while page.next_page and len(events) < 2000:
            page = client.read_events_page(page.next_page)
            events += page.events
    parts = [flow_run.model_dump_json()]
    parts += [t.model_dump_json() for t in task_runs]
    parts += [log.model_dump_json() for log in logs]
    parts += [json.dumps(a) for a in artifacts]
    parts += [e.model_dump_json() for e in events]
    found = {
        "parameters": flow_run.parameters,
        "task_runs": [t.name for t in task_runs],
        "log_messages": [log.message for log in logs],
        "artifact_keys": {a["key"] for a in artifacts},
        "event_names": {e.event for e in events},
    }
    return "\n".join(parts), found


def assert_absent(text: str, secrets: dict[str, str]) -> None:
    # as written, and as JSON-escaped (e.g. the URL path inside a JSON string)
    for name, value in secrets.items():
        for form in {value, json.dumps(value)[1:-1], value.lstrip("/")}:
            assert form not in text, f"the {name} appears in what the Prefect API holds"


def test_no_secret_in_parameters_task_runs_logs_artifacts_or_events(
    prefect_server, judgeflow_env, database_url, db, judge_server, monkeypatch, pg_server
):
    secrets = canaries()
    for name in ("base_user", "base_password", "base_query_key"):
        del secrets[name]  # see the Secret block test: credentials in the base URL replace the key
    # the test server's own generated password (scram), in the URL as a user would put it
    secrets["db_password"] = pg_server.password()
    insert_traces(db, recent_traces(8))
    url = make_url(database_url).set(password=secrets["db_password"]).render_as_string(hide_password=False)

    with WebhookReceiver(default=500) as hook:  # a failing webhook: its errors are logged too
        for key, value in {
            "JUDGEFLOW_DATABASE_URL": url,
            "JUDGEFLOW_JUDGE_API_KEY": secrets["api_key"],
            "JUDGEFLOW_ALERT_WEBHOOK_URL": hook.url + secrets["webhook_path"],
            "JUDGEFLOW_ALERT_WEBHOOK_SECRET": secrets["webhook_secret"],
            "JUDGEFLOW_ALERT_MIN_SAMPLES": "1",
            "JUDGEFLOW_TOXICITY_RATE_MAX": "0.1",
            "JUDGEFLOW_ALERT_WEBHOOK_RETRIES": "1",
            "JUDGEFLOW_ALERT_WEBHOOK_BACKOFF_S": "0.01",
        }.items():
            monkeypatch.setenv(key, value)
        summary = score_new_traces(batch_size=5, evaluate_alerts=True)

    # the secrets were really in use
    auth = {r.headers.get("Authorization") or r.headers.get("authorization") for r in judge_server.requests}
    assert f"Bearer {secrets['api_key']}" in auth
    assert hook.requests and hook.requests[0].path.endswith(secrets["webhook_path"])
    assert hook.requests[0].header("X-Judgeflow-Signature").startswith("sha256=")
    assert summary.scored == 16 and summary.failed == 2

    def complete(found) -> bool:
        """What was read back is the real thing, not an empty or partial answer
        (logs and events reach the server's database a moment after the run)."""
        return (
            found["parameters"]["evaluate_alerts"] is True
            and len(found["task_runs"]) >= 3
            and any("pending" in m for m in found["log_messages"])
            and any("tr-rejected" in m for m in found["log_messages"])  # the failure was logged
            and {SUMMARY_KEY, REPORT_KEY, PROGRESS_KEY, ALERT_STATE_KEY} <= found["artifact_keys"]
            and "prefect.task-run.Completed" in found["event_names"]
        )

    deadline = time.monotonic() + 30
    text, found = everything_about(summary.flow_run_id)
    while not complete(found) and time.monotonic() < deadline:
        time.sleep(1)
        text, found = everything_about(summary.flow_run_id)
    assert complete(found), json.dumps(found, default=sorted, indent=1)
    assert_absent(text, secrets)
    assert_absent(eval_results_text(db), secrets)


def test_secrets_from_prefect_secret_blocks_do_not_leak_either(
    prefect_server, judgeflow_env, db, judge_server, monkeypatch
):
    """The flow resolves prefect-secret:// references at its entry point."""
    from prefect.blocks.system import Secret

    secrets = canaries()
    insert_traces(db, recent_traces(4))
    names = {}
    for field in ("api_key", "webhook_secret"):
        names[field] = f"judgeflow-leak-{field.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
        Secret(value=secrets[field]).save(names[field], _sync=True)

    with WebhookReceiver() as hook:
        monkeypatch.setenv("JUDGEFLOW_JUDGE_API_KEY", f"prefect-secret://{names['api_key']}")
        monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_SECRET", f"prefect-secret://{names['webhook_secret']}")
        monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_URL", hook.url)
        monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "1")
        monkeypatch.setenv("JUDGEFLOW_TOXICITY_RATE_MAX", "0.1")
        summary = score_new_traces(evaluate_alerts=True)

    auth = {r.headers.get("Authorization") or r.headers.get("authorization") for r in judge_server.requests}
    assert f"Bearer {secrets['api_key']}" in auth, "the flow did not resolve the Secret block reference"
    [delivery] = hook.requests
    from judgeflow.alerts.notify import verify_signature

    assert verify_signature(
        secrets["webhook_secret"], delivery.header("X-Judgeflow-Timestamp"), delivery.body,
        delivery.header("X-Judgeflow-Signature"), delivery_id=delivery.header("X-Judgeflow-Delivery"),
    )
    held, _ = everything_about(summary.flow_run_id)
    assert_absent(held, {"api_key": secrets["api_key"], "webhook_secret": secrets["webhook_secret"]})
    assert_absent(eval_results_text(db), {"api_key": secrets["api_key"], "webhook_secret": secrets["webhook_secret"]})


def test_a_base_url_from_a_secret_block_does_not_leak(prefect_server, judgeflow_env, db, judge_server, monkeypatch):
    """The judge base URL, with credentials in its userinfo and query, as a
    Prefect Secret block; every judge call fails, so the errors are logged and stored."""
    from prefect.blocks.system import Secret

    secrets = canaries()
    insert_traces(db, recent_traces(4))
    name = f"judgeflow-leak-base-{uuid.uuid4().hex[:8]}"
    Secret(value=base_url_with_credentials(judge_server.url, secrets)).save(name, _sync=True)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_API_BASE", f"prefect-secret://{name}")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_API_KEY", secrets["api_key"])
    # litellm's async HTTP clients refuse a base URL with userinfo beside the key's
    # header: every call fails, its error logged and stored
    summary = score_new_traces(evaluate_alerts=False)
    assert summary.scored == 0 and summary.failed == 10
    stored = eval_results_text(db)
    assert stored.count("judge_unavailable") == 10
    assert judge_server.calls() == 0

    wanted = {k: secrets[k] for k in ("api_key", "base_user", "base_password", "base_query_key")}
    deadline = time.monotonic() + 30
    held, found = everything_about(summary.flow_run_id)
    while not any("tr-rejected failed" in m for m in found["log_messages"]) and time.monotonic() < deadline:
        time.sleep(1)
        held, found = everything_about(summary.flow_run_id)
    assert any("tr-rejected failed" in m for m in found["log_messages"])
    assert_absent(held, wanted)
    assert_absent(stored, wanted)
