"""`judgeflow serve`'s deployments: built without starting a runner, then
registered on the test Prefect server; the same as deployments/prefect.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from judgeflow.errors import ConfigError
from judgeflow.cli.serve import (
    BACKFILL_PARAMETERS,
    NIGHTLY_CRON,
    NIGHTLY_PARAMETERS,
    build_deployments,
    schedule_timezone,
)
from judgeflow.config.settings import Settings

PREFECT_YAML = Path(__file__).resolve().parents[2] / "deployments" / "prefect.yaml"


@pytest.fixture
def settings() -> Settings:
    return Settings(_env_file=None)


def by_name(deployments) -> dict:
    return {d.name: d for d in deployments}


def test_nightly_and_backfill(settings):
    built = by_name(build_deployments(settings))
    assert set(built) == {"nightly", "on-demand", "shards"}

    nightly = built["nightly"]
    assert nightly.flow_name == "score-new-traces"
    assert nightly.entrypoint == "judgeflow.flows.scoring.score_new_traces"
    [schedule] = nightly.schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone, schedule.active) == (NIGHTLY_CRON, "UTC", True)
    assert nightly.concurrency_limit == 1
    assert nightly.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    assert nightly.parameters == NIGHTLY_PARAMETERS
    assert nightly.enforce_parameter_schema

    backfill = built["on-demand"]
    assert backfill.flow_name == "backfill-traces"
    assert backfill.entrypoint == "judgeflow.flows.backfill.backfill_traces"
    assert backfill.schedules == []
    assert backfill.parameters == BACKFILL_PARAMETERS
    assert backfill._parameter_openapi_schema.required == ["since", "until"]

    shards = built["shards"]
    assert shards.flow_name == "score-shard"
    assert shards.entrypoint == "judgeflow.flows.shards.score_shard"
    assert shards.schedules == [] and shards.parameters == {}
    # no concurrency limit: children of a limited deployment can wait forever for a slot (prefect#16027)
    assert shards.concurrency_limit is None


def test_the_same_as_prefect_yaml(settings):
    config = {d["name"]: d for d in yaml.safe_load(PREFECT_YAML.read_text())["deployments"]}
    for name, built in by_name(build_deployments(settings)).items():
        spec = config[name]
        assert built.parameters == spec["parameters"]
        assert sorted(built.tags) == sorted(spec["tags"])
        limit = spec.get("concurrency_limit")
        assert built.concurrency_limit == (limit["limit"] if limit else None)
        if limit:
            assert built.concurrency_options.collision_strategy.value == limit["collision_strategy"]
        assert [s.schedule.cron for s in built.schedules] == [s["cron"] for s in spec["schedules"]]


def test_timezone_from_the_argument_or_the_setting(settings):
    assert schedule_timezone(settings) == "UTC"
    assert schedule_timezone(settings, "Europe/Berlin") == "Europe/Berlin"
    [nightly, *_] = build_deployments(settings, timezone="Asia/Tokyo")
    assert nightly.schedules[0].schedule.timezone == "Asia/Tokyo"
    if "schedule_timezone" in Settings.model_fields:
        configured = Settings(_env_file=None, schedule_timezone="America/Chicago")
        assert schedule_timezone(configured) == "America/Chicago"


def test_an_unknown_timezone_is_a_clear_error(settings):
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        build_deployments(settings, timezone="Mars/Olympus")


def test_registers_on_the_prefect_server(prefect_server, settings):
    """What `prefect.serve` registers before it starts polling (it then only runs them)."""
    from prefect.client.orchestration import get_client

    ids = {d.name: d.apply() for d in build_deployments(settings, timezone="Europe/Berlin")}
    with get_client(sync_client=True) as client:
        nightly = client.read_deployment(ids["nightly"])
        backfill = client.read_deployment(ids["on-demand"])
    [schedule] = nightly.schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone) == (NIGHTLY_CRON, "Europe/Berlin")
    assert nightly.global_concurrency_limit.limit == 1
    assert nightly.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    assert nightly.parameters == NIGHTLY_PARAMETERS
    assert backfill.schedules == []
    assert backfill.parameter_openapi_schema["required"] == ["since", "until"]
