"""`judgeflow alerts check` with no PREFECT_API_URL: the command uses judgeflow's own
local Prefect server (started under a tmp JUDGEFLOW_HOME, with its auth string), and a
"fired" whose webhook refuses it for good dies inside the command. Its
``judgeflow.alert.delivery.dead`` event must be on that server once the command exits
(the header of `judgeflow alerts` says each dead delivery was emitted as one)."""

from __future__ import annotations

import base64
import json
import time
import urllib.request

import sqlalchemy as sa

from judgeflow.alerts.dead_letters import DEAD_EVENT, dead_event_id
from judgeflow.infra.prefect_server import LocalPrefectServer
from tests.alerts.helpers import add_results, migrated
from tests.infra.test_prefect_server import _judgeflow
from tests.support.processes import kill_processes_under
from tests.support.webhook_receiver import WebhookReceiver

# the server stores received events in batches: an event sent before the command
# exited is readable within seconds; this bounds the wait on a loaded machine
STORED_WITHIN_S = 120.0


def _events(server: LocalPrefectServer, name: str) -> list[dict]:
    auth = "Basic " + base64.b64encode(server.auth_file.read_text().strip().encode()).decode()
    request = urllib.request.Request(
        f"{server.api_url}/events/filter", method="POST",
        headers={"Content-Type": "application/json", "Authorization": auth},
        data=json.dumps({"filter": {"event": {"name": [name]}}, "limit": 50}).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["events"]


def test_a_fired_that_dies_inside_alerts_check_reaches_the_local_prefect_server(tmp_path, db, database_url):
    engine = migrated(db)
    add_results(engine, not_passed=20)
    home = tmp_path / "home"
    home.mkdir()
    server = LocalPrefectServer(home)
    try:
        # a permanent refusal (its 404 echoes the path, a secret token): the "fired" dies at its first try
        with WebhookReceiver(default=404) as hook:
            checked = _judgeflow(home, "alerts", "check", JUDGEFLOW_DATABASE_URL=database_url,
                                 JUDGEFLOW_ALERT_WEBHOOK_URL=hook.url_for("/hooks/ourSecretHook0042"), JUDGEFLOW_ALERT_MIN_SAMPLES="10",
                                 JUDGEFLOW_ALERT_PREFECT_EVENTS="false")
            assert hook.requests, checked.stderr
        assert checked.returncode == 0, checked.stderr
        assert "prefect (local, started)" in checked.stderr, checked.stderr
        assert "Traceback" not in checked.stderr, checked.stderr
        with engine.connect() as conn:
            [delivery_id] = conn.execute(sa.text(
                "SELECT e.delivery_id FROM judgeflow.alert_deliveries d "
                "JOIN judgeflow.alert_events e ON e.id = d.event_id "
                "WHERE d.status = 'dead' AND d.channel = 'webhook' AND e.rule = 'toxicity_rate' "
                "AND e.kind = 'fired'")).one()
        wanted = str(dead_event_id(str(delivery_id), "webhook"))

        deadline = time.monotonic() + STORED_WITHIN_S
        while True:
            events = {e["id"]: e for e in _events(server, DEAD_EVENT)}
            if wanted in events or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert wanted in events, (sorted(events), checked.stderr[-2000:])
        event = events[wanted]
        assert event["payload"]["notification"] == "fired" and event["payload"]["rule"] == "toxicity_rate"
        assert event["payload"]["channel"] == "webhook" and "404" in event["payload"]["error"]
        assert event["resource"]["judgeflow.rule"] == "toxicity_rate"
        assert "ourSecretHook0042" not in json.dumps(event)  # the hook's path is its secret
    finally:
        server.stop()
        kill_processes_under(home)
