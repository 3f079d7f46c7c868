"""Prefect heartbeats of judgeflow's flow runs: still sent, no longer waited for
(flows/heartbeat.py), on a real Prefect engine and server."""

from __future__ import annotations

import os
import sys
import threading
import time
from uuid import UUID

from prefect import flow

import judgeflow.flows  # noqa: F401 - what every process running judgeflow's flows imports
from judgeflow.flows import heartbeat


def _heartbeat_threads() -> list[threading.Thread]:
    """Threads running Prefect's heartbeat loop now (found by their stack)."""
    frames = sys._current_frames()
    found = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident)
        while frame is not None:
            if frame.f_code.co_name == "heartbeat_loop":
                found.append(thread)
                break
            frame = frame.f_back
    return found


def _heartbeat_events(flow_run_id: UUID, timeout: float = 20.0) -> list:
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_events(EventFilter(
                event=EventNameFilter(name=["prefect.flow-run.heartbeat"]),
                resource=EventResourceFilter(id=[f"prefect.flow-run.{flow_run_id}"]),
            ), limit=50)
            if page.events or time.monotonic() > deadline:
                return page.events
            time.sleep(0.25)


def test_a_flow_run_sends_its_heartbeat_and_ends_without_waiting_for_the_thread(prefect_server):
    assert heartbeat.stop_joining_heartbeats() is True  # applied at import; idempotent

    @flow(name="heartbeat-probe")
    def probe() -> tuple[UUID, list[threading.Thread]]:
        from prefect.runtime import flow_run

        time.sleep(0.3)  # past the thread's first heartbeat, into its 1 s sleep
        return UUID(flow_run.id), [t for t in _heartbeat_threads() if t not in earlier]

    earlier = set(_heartbeat_threads())  # earlier runs' threads, stopping on their own
    flow_run_id, during = probe()

    assert len(during) == 1, "the run had no heartbeat thread"
    [thread] = during
    # Prefect's own sync engine joins the thread here, up to a second later:
    # with judgeflow's flows the run ended while the thread was still asleep
    assert thread.is_alive()
    thread.join(timeout=3)
    assert not thread.is_alive(), "the heartbeat thread did not stop after its run ended"
    events = _heartbeat_events(flow_run_id)
    assert len(events) == 1, "the run's heartbeat never reached the Prefect server (or was sent after it ended)"
    assert events[0].resource.get("prefect.resource.name")


def test_a_prefect_release_with_another_heartbeat_helper_is_left_alone(monkeypatch):
    from contextlib import contextmanager

    from prefect import flow_engine

    @contextmanager
    def other_helper(engine, interval):
        yield

    monkeypatch.setattr(flow_engine, "_send_heartbeats", other_helper)
    assert heartbeat.stop_joining_heartbeats() is False
    assert flow_engine._send_heartbeats is other_helper


def test_a_deployment_entrypoint_loaded_by_path_gets_it_too(tmp_path):
    # deployments/prefect.yaml names flows/scoring.py:score_new_traces, which a Prefect
    # worker loads as a file, not as judgeflow.flows.scoring
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = (
        "from prefect.flows import load_flow_from_entrypoint\n"
        "from prefect import flow_engine\n"
        "load_flow_from_entrypoint('flows/scoring.py:score_new_traces')\n"
        "print(getattr(flow_engine._send_heartbeats, '__judgeflow_unjoined__', False))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True"
