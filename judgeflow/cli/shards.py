"""Where `judgeflow score --shards N` runs its children. A work pool serving
judgeflow's shard deployment (``score-shard/shards``, deployments/prefect.yaml)
runs them there. Without one, the command serves a shard deployment of its
own for the night (judgeflow/cli/shard_server.py: Prefect's Runner in a
subprocess, each child a process of its own) and stops it and deletes the
deployment when the night ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

import typer

from judgeflow.config.scrub import scrub
from judgeflow.errors import PrefectServerError
from judgeflow.run.shards import SHARD_DEPLOYMENT, SHARD_FLOW

REGISTER_TIMEOUT_S = 300.0  # the server's imports (Prefect, judgeflow's flows) on a busy machine
STOP_TIMEOUT_S = 30.0


def pooled_deployment() -> str | None:
    """``score-shard/shards`` when it is registered on a work pool that has a worker online (the
    pool is ready), else None: children sent to a pool nobody serves would wait forever."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import WorkPoolStatus
    from prefect.exceptions import ObjectNotFound

    name = f"{SHARD_FLOW}/{SHARD_DEPLOYMENT}"
    with get_client(sync_client=True) as client:
        try:
            deployment = client.read_deployment_by_name(name)
            if not deployment.work_pool_name:
                return None
            pool = client.read_work_pool(deployment.work_pool_name)
        except ObjectNotFound:
            return None
    return name if pool.status == WorkPoolStatus.READY else None


@contextmanager
def children_deployment(shards: int) -> Iterator[str | None]:
    """The deployment the night's children are started from, for the time of the ``with``
    (None: one shard, no children)."""
    if shards <= 1:
        yield None
        return
    pooled = pooled_deployment()
    if pooled is not None:
        typer.echo(f"shards: {shards} child flow runs of {pooled}, on its work pool", err=True)
        yield pooled
        return
    name = f"local-{uuid.uuid4().hex[:8]}"
    env = {"PREFECT_RUNNER_POLL_FREQUENCY": "1", **os.environ}  # a child starts within a second of its run
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen([sys.executable, "-m", "judgeflow.cli.shard_server", name, str(shards)],
                                  env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deployment_id = None
        try:
            deployment_id = _registered(f"{SHARD_FLOW}/{name}", server, log)
            typer.echo(f"shards: {shards} child flow runs of {SHARD_FLOW}/{name}, served here "
                       f"(pid {server.pid}) until the night ends", err=True)
            yield f"{SHARD_FLOW}/{name}"
        finally:
            _stop(server)
            _delete(deployment_id)


def _registered(name: str, server: subprocess.Popen, log) -> str:
    """The id of deployment ``name`` once the local server registered it."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + REGISTER_TIMEOUT_S
    with get_client(sync_client=True) as client:
        while True:
            try:
                return str(client.read_deployment_by_name(name).id)
            except ObjectNotFound:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                said = log.read().decode(errors="replace").strip().splitlines()[-1:] or ["(nothing)"]
                raise PrefectServerError(f"the local shard server did not register {name} "
                                         f"(exit {server.poll()}): {scrub(said[0])}")
            time.sleep(0.5)


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (the Runner, and any child still running), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if server.poll() is not None:
            return
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue


def _delete(deployment_id: str | None) -> None:
    if deployment_id is None:
        return
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.delete_deployment(deployment_id)
