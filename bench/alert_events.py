"""How long an alert's Prefect event takes to count as delivered:
``.venv/bin/python -m bench.alert_events [--interval 1] [--events 5]``.

An event is delivered once the Prefect API returns it by its id
(judgeflow/alerts/notify.py); the server stores the events it receives every
``PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL`` seconds (Prefect's
default 5; judgeflow's local server 1). This starts judgeflow's local Prefect
server in a temporary directory with the given interval and times, event by
event, ``emit_event`` until the API returns it (the first includes starting
Prefect's events worker and its websocket).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", default="1", help="the server's event persister flush interval, seconds")
    parser.add_argument("--events", type=int, default=5)
    args = parser.parse_args()
    os.environ["PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL"] = args.interval

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from judgeflow.alerts.notify import _prefect_confirm, _prefect_emit
    from judgeflow.infra.prefect_server import LocalPrefectServer

    server = LocalPrefectServer(Path(tempfile.mkdtemp(prefix="judgeflow-bench-events-")))
    try:
        url, _ = server.start(timeout_s=600)
        with temporary_settings(updates={PREFECT_API_URL: url}):
            waits = []
            for _ in range(args.events):
                event_id = str(uuid.uuid4())
                started = time.monotonic()
                _prefect_emit(event="judgeflow.bench", resource={"prefect.resource.id": "judgeflow.bench"},
                              id=uuid.UUID(event_id))
                if _prefect_confirm([event_id], time.monotonic() + 60) != {event_id}:
                    raise SystemExit(f"event {event_id} was not stored within 60 s")
                waits.append(time.monotonic() - started)
                time.sleep(1.3)  # not in step with the server's flushes
        print(f"flush interval {args.interval} s: emit -> returned by the API, s: "
              + ", ".join(f"{w:.2f}" for w in waits))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
