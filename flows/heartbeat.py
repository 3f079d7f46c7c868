"""Prefect's flow-run heartbeats, without the wait at the end of every run.

Prefect 3.8 emits a ``prefect.flow-run.heartbeat`` event every
``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (180 by default) from a daemon
thread that sleeps in 1 s steps. Its sync flow engine joins that thread when
the flow's body returns, so every sync flow run ends 0-1 s after its work,
0.5 s on average: measured, 0.07-0.56 s between the scoring flow's last line
and its final state, a tenth of a 400-trace run with a 200 ms judge.

Prefect's async engine already leaves the thread to stop on its own
(``join_on_exit=False``): it wakes within a second, sees the stop flag and
returns without emitting again, and as a daemon thread it never holds up the
process's exit. judgeflow's flows are sync; :func:`stop_joining_heartbeats`
makes Prefect's sync engine do the same for them. The heartbeats themselves
are unchanged (same events, same frequency), so Prefect's zombie-run
detection keeps working.

Applied when ``judgeflow.flows`` is imported, which every process that runs
a judgeflow flow does first: the CLI and ``judgeflow serve`` import the flow
modules, and ``flows/scoring.py`` imports the package itself, for a Prefect
worker that loads a deployment's entrypoint (``flows/scoring.py:...``) by its
path. A Prefect release whose heartbeat helper looks different is left alone:
runs then end as Prefect has them end.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager

_MARK = "__judgeflow_unjoined__"


def stop_joining_heartbeats() -> bool:
    """Make Prefect's sync flow engine stop its heartbeat thread without
    waiting for it. Returns whether Prefect's engine now does so (idempotent)."""
    from prefect import flow_engine

    send_heartbeats = getattr(flow_engine, "_send_heartbeats", None)
    if send_heartbeats is None:
        return False
    if getattr(send_heartbeats, _MARK, False):
        return True
    try:
        parameters = inspect.signature(send_heartbeats).parameters
    except (TypeError, ValueError):
        return False
    if list(parameters)[:2] != ["engine", "join_on_exit"]:
        return False

    @contextmanager
    def send_heartbeats_unjoined(engine, join_on_exit: bool = True):
        with send_heartbeats(engine, join_on_exit=False):
            yield

    setattr(send_heartbeats_unjoined, _MARK, True)
    send_heartbeats_unjoined.__wrapped__ = send_heartbeats  # type: ignore[attr-defined]
    flow_engine._send_heartbeats = send_heartbeats_unjoined
    return True
