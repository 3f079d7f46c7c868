"""A sharded night's Prefect I/O: the parent starts its children from the shard
deployment, waits for their flow runs to end (cancelling them when it is asked
to stop), and reads what each child stored."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.states import Cancelled, Cancelling

from judgeflow.config.settings import Settings
from judgeflow.db.engine import engine_for
from judgeflow.db.night_ledger import NightLimits, night_limits, night_spend, open_night
from judgeflow.db.run_results import results_of_runs, traces_of_runs
from judgeflow.errors import ConfigError
from judgeflow.run.entry import StopRequest
from judgeflow.run.shards import ShardReport, shard_key, shard_run_name

log = logging.getLogger("judgeflow.shards")
POLL_S = 2.0


# retries=2: the row is entered once (a retry, or a retried parent, finds it)
@task(name="open-night-ledger", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=1)
def open_night_ledger(settings: Settings, parent_run_id: str, limits: NightLimits) -> NightLimits:
    """The night's shared budget and trace limit, entered before any child starts
    (judgeflow/db/night_ledger.py); returns what stands (a retried parent's first entry)."""
    with engine_for(settings).begin() as conn:
        open_night(conn, parent_run_id, limits)
        return night_limits(conn, parent_run_id)


# retries=2: a read
@task(name="read-night-limits", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=1)
def read_night_limits(settings: Settings, night_run_id: str) -> NightLimits:
    """A child's night: what its parent entered in the shared ledger."""
    with engine_for(settings).connect() as conn:
        limits = night_limits(conn, night_run_id)
    if limits is None:
        raise ConfigError(f"no sharded night {night_run_id} in judgeflow's database: a shard runs only for the "
                          "parent run that started it (judgeflow score --shards N)")
    return limits


# retries=2: each child's idempotency key makes a retry find the children already started, not start more
@task(name="start-shard-runs", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=2)
def start_shard_runs(deployment: str, shards: int, parameters: dict, *, parent_run_id: str,
                     night: datetime, takeover_of: list[int] | None = None) -> list[str]:
    """The night's ``shards`` child flow runs, started from ``deployment`` (flow/deployment) and not
    waited for; started inside the parent's flow run, Prefect shows them under it. ``takeover_of``:
    instead, one take-over run for each of these (lost) shards."""
    started = []
    for shard in takeover_of or range(1, shards + 1):
        takeover = takeover_of is not None
        child = run_deployment(
            deployment, parameters={**parameters, "shard": shard, "shards": shards}, timeout=0,
            flow_run_name=shard_run_name(night, shard, shards, takeover=takeover),
            idempotency_key=shard_key(parent_run_id, shard, shards, takeover=takeover),
        )
        log.info("shard %d of %d%s: flow run %s (%s)", shard, shards, " take-over" if takeover else "",
                 child.id, child.name)
        started.append(str(child.id))
    return started


# retries=0: the wait's own loop rides out the API's errors; a retry would wait again for the same runs
@task(name="wait-for-shard-runs", cache_policy=NO_CACHE, persist_result=False, retries=0)
def wait_for_shard_runs(flow_run_ids: list[str], stop: StopRequest, parent_run_id: str | None = None) -> bool:
    """Until every child's flow run is in a final state. A stop request (Ctrl-C in the command), the
    parent's own flow run cancelled through Prefect (the UI's Cancel: Cancelling), or the parent ending
    here on an error, cancels the children that are still going. True: the parent was cancelled."""
    with get_client(sync_client=True) as client:
        cancelled = parent_cancelled = False
        try:
            while True:
                states = {run_id: client.read_flow_run(run_id).state for run_id in flow_run_ids}
                going = [run_id for run_id, state in states.items() if state is None or not state.is_final()]
                if not going:
                    return parent_cancelled
                if not parent_cancelled and parent_run_id is not None:
                    own = client.read_flow_run(parent_run_id).state
                    parent_cancelled = own is not None and (own.is_cancelling() or own.is_cancelled())
                if (stop.requested() or parent_cancelled) and not cancelled:
                    _cancel(client, going)
                    cancelled = True
                time.sleep(POLL_S)
        except BaseException:
            _cancel(client, flow_run_ids)
            raise


def _cancel(client, flow_run_ids: list[str]) -> None:
    """A child not started yet is cancelled at once; a running one is asked to cancel (Cancelling),
    and its worker or runner ends its process, as the UI's cancel does."""
    for run_id in flow_run_ids:
        state = client.read_flow_run(run_id).state
        if state is not None and state.is_final():
            continue
        started = state is not None and (state.is_running() or state.is_cancelling())
        log.warning("cancelling shard flow run %s", run_id)
        new = Cancelling if started else Cancelled
        client.set_flow_run_state(run_id, new(message="the night's parent run was stopped"), force=True)


# retries=2: reads only
@task(name="read-shard-results", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=1)
def read_shard_results(settings: Settings, children: list[tuple[int, str, bool]], parent_run_id: str
                       ) -> tuple[list[ShardReport], int, tuple[float, float]]:
    """Each child's (shard, flow run id, take-over) final state and run time (Prefect's), what it stored
    (judgeflow's database), the distinct traces they stored results of together, and the night's (spent,
    in flight) in its ledger."""
    flow_run_ids = [run_id for _, run_id, _ in children]
    with engine_for(settings).connect() as conn:
        stored = results_of_runs(conn, flow_run_ids)
        traces = traces_of_runs(conn, flow_run_ids)
        spend = night_spend(conn, parent_run_id)
    reports = []
    with get_client(sync_client=True) as client:
        for shard, run_id, takeover in children:
            run = client.read_flow_run(run_id)
            duration = run.total_run_time.total_seconds() if run.total_run_time else None
            reports.append(ShardReport(shard=shard, flow_run_id=run_id, state=run.state.type.value,
                                       state_name=run.state.name, duration_s=duration, takeover=takeover,
                                       **stored[run_id]))
    return reports, traces, spend
