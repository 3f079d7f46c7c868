"""tasks/shards.py against the suite's Prefect server: the children a parent starts are
found again, not started twice, when it starts them again with the same keys (a retried
parent); a stop cancels the children still going. The deployment is registered and
served by nobody, so its runs stay scheduled: nothing here judges."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from judgeflow.run.entry import StopRequest
from judgeflow.tasks.shards import start_shard_runs, wait_for_shard_runs

NIGHT = datetime(2026, 11, 29, 2, 0, tzinfo=timezone.utc)


@pytest.fixture
def unserved_deployment(prefect_server):
    from prefect.client.orchestration import get_client

    from judgeflow.flows.shards import score_shard

    name = f"unserved-{uuid.uuid4().hex[:8]}"
    deployment_id = score_shard.to_deployment(name=name).apply()
    yield f"score-shard/{name}", deployment_id
    with get_client(sync_client=True) as client:
        client.delete_deployment(deployment_id)


def _runs_of(deployment_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    with get_client(sync_client=True) as client:
        return client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])))


def test_a_parent_started_again_gets_its_children_back_not_a_second_set(unserved_deployment):
    name, deployment_id = unserved_deployment
    parent = str(uuid.uuid4())
    first = start_shard_runs.fn(name, 2, {"sample_rate": 1.0}, parent_run_id=parent, night=NIGHT)
    again = start_shard_runs.fn(name, 2, {"sample_rate": 1.0}, parent_run_id=parent, night=NIGHT)
    assert first == again and len(set(first)) == 2

    runs = {str(run.id): run for run in _runs_of(deployment_id)}
    assert set(runs) == set(first)
    assert [runs[i].name for i in first] == ["score-new-traces/2026-11-29 shard 1 of 2",
                                            "score-new-traces/2026-11-29 shard 2 of 2"]
    assert [runs[i].parameters for i in first] == [{"sample_rate": 1.0, "shard": 1, "shards": 2},
                                                   {"sample_rate": 1.0, "shard": 2, "shards": 2}]

    # another parent (another night) starts its own
    other = start_shard_runs.fn(name, 2, {}, parent_run_id=str(uuid.uuid4()), night=NIGHT)
    assert not set(other) & set(first) and len(_runs_of(deployment_id)) == 4


def test_a_stop_cancels_the_children_still_going(unserved_deployment):
    from prefect.client.orchestration import get_client

    name, _ = unserved_deployment
    children = start_shard_runs.fn(name, 2, {}, parent_run_id=str(uuid.uuid4()), night=NIGHT)
    stop = StopRequest()
    stop.request()
    wait_for_shard_runs.fn(children, stop)  # returns once they are final: nobody would ever run them
    with get_client(sync_client=True) as client:
        states = [client.read_flow_run(run_id).state for run_id in children]
    assert [state.type.value for state in states] == ["CANCELLED", "CANCELLED"]
