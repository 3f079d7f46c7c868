"""The local shard server `judgeflow score --shards N` starts when no work pool
serves judgeflow's shard deployment: Prefect's Runner (``prefect.serve``)
serving a shard deployment of the command's own for the night, each child flow
run a process of its own. ``python -m judgeflow.cli.shard_server NAME LIMIT``;
the command stops it when the night ends (judgeflow/cli/shards.py)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    name, limit = argv[0], int(argv[1])
    from prefect import serve
    from prefect.types.entrypoint import EntrypointType

    from judgeflow.flows.shards import score_shard

    deployment = score_shard.to_deployment(
        name=name, entrypoint_type=EntrypointType.MODULE_PATH, tags=["judgeflow", "shard"],
        description="A sharded night's children, served by the `judgeflow score --shards` that started them.",
    )
    # no concurrency limit on the deployment (children of a limited deployment have been left
    # AwaitingConcurrencySlot, prefect#16027): ``limit`` bounds the flow runs this process starts
    serve(deployment, limit=limit)


# the fork server of a child's judge workers imports __main__ (docs/DEVELOPING.md)
if __name__ == "__main__":
    main(sys.argv[1:])
