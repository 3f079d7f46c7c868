"""`judgeflow score --shards N`'s side in the command: what it refuses in one line before
anything starts, and which deployment its children are started from (a ready work pool's,
else its own)."""

from __future__ import annotations

import uuid

import pytest
from typer.testing import CliRunner

from judgeflow.cli import app
from judgeflow.cli.shards import pooled_deployment

runner = CliRunner()


def test_the_batch_api_with_shards_is_refused_in_one_line_exit_2(judgeflow_env):
    result = runner.invoke(app, ["score", "--shards", "2", "--batch"])
    assert result.exit_code == 2, result.output
    [line] = [line for line in result.output.splitlines() if "--shards" in line]
    assert line.startswith("judgeflow: --shards 2 cannot run with") and "the batch API" in line


def test_the_batch_api_from_the_environment_is_refused_too(judgeflow_env, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_JUDGE_BATCH", "true")
    result = runner.invoke(app, ["score", "--shards", "3"])
    assert result.exit_code == 2 and "the batch API" in result.output, result.output


def test_the_pools_deployment_only_when_a_worker_serves_it(prefect_server):
    """Registered on a work pool nobody polls, score-shard/shards is not used: children sent
    there would wait forever, so the command serves its own."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    from judgeflow.flows.shards import score_shard

    with get_client(sync_client=True) as client:
        try:
            client.delete_deployment(client.read_deployment_by_name("score-shard/shards").id)
        except ObjectNotFound:
            pass
        assert pooled_deployment() is None  # not registered
        pool = f"idle-{uuid.uuid4().hex[:8]}"
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        deployment_id = score_shard.to_deployment(name="shards").apply(work_pool_name=pool)
        try:
            assert pooled_deployment() is None  # on a pool with no worker online
        finally:
            client.delete_deployment(deployment_id)
            client.delete_work_pool(pool)
