"""deployments/prefect.yaml: entry points resolve from the repository root,
parameters validate against the flows' signatures, the schedule and the
concurrency are what the docs say, and `prefect deploy --all` registers its
deployments on a real Prefect server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from judgeflow.cli import serve as serve_module

REPO = Path(__file__).resolve().parents[2]
PREFECT_YAML = REPO / "deployments" / "prefect.yaml"
CRON = "0 2 * * *"
POOL = "judgeflow"

EXPECTED = {
    "nightly": ("score-new-traces", REPO / "flows" / "scoring.py"),
    "on-demand": ("backfill-traces", REPO / "flows" / "backfill.py"),
    "shards": ("score-shard", REPO / "flows" / "shards.py"),
}


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(PREFECT_YAML.read_text())


@pytest.fixture(scope="module")
def deployments(config) -> dict[str, dict]:
    return {d["name"]: d for d in config["deployments"]}


def load_flow(entrypoint: str):
    from prefect.flows import load_flow_from_entrypoint

    cwd = os.getcwd()
    os.chdir(REPO)  # `prefect deploy` resolves entry points against its working directory
    try:
        return load_flow_from_entrypoint(entrypoint, use_placeholder_flow=False)
    finally:
        os.chdir(cwd)


def test_the_file_is_valid_for_prefect(config):
    from prefect.cli.deploy._models import PrefectYamlModel

    model = PrefectYamlModel.model_validate(config)
    assert sorted(d.name for d in model.deployments) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_entrypoints_resolve_from_the_repository_root(deployments, name):
    flow_name, path = EXPECTED[name]
    entrypoint = deployments[name]["entrypoint"]
    assert entrypoint.split(":")[0] == str(path.relative_to(REPO))
    flow = load_flow(entrypoint)
    assert flow.name == flow_name
    assert Path(flow.fn.__code__.co_filename).resolve() == path


def test_nightly_parameters_validate_against_the_flow_signature(deployments):
    nightly = deployments["nightly"]
    flow = load_flow(nightly["entrypoint"])
    validated = flow.validate_parameters(nightly["parameters"])
    from judgeflow.metrics.registry import chosen

    assert validated["metrics"] is None and chosen(validated["metrics"]) == ["toxicity", "hallucination"]
    assert nightly["parameters"] == serve_module.NIGHTLY_PARAMETERS  # judgeflow serve runs the same


def test_backfill_needs_only_the_range_at_run_time(deployments):
    from prefect.exceptions import ParameterTypeError

    backfill = deployments["on-demand"]
    flow = load_flow(backfill["entrypoint"])
    with pytest.raises(ParameterTypeError, match="since|until"):
        flow.validate_parameters(backfill["parameters"])
    flow.validate_parameters(
        {**backfill["parameters"], "since": "2026-11-01T00:00:00Z", "until": "2026-11-08T00:00:00Z"}
    )
    assert backfill["parameters"] == serve_module.BACKFILL_PARAMETERS


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parameter_names_are_the_flows(deployments, name):
    import inspect

    flow = load_flow(deployments[name]["entrypoint"])
    assert set(deployments[name]["parameters"]) <= set(inspect.signature(flow.fn).parameters)


def test_nightly_schedule_and_concurrency(deployments):
    from prefect.client.schemas.objects import ConcurrencyLimitStrategy

    nightly = deployments["nightly"]
    [schedule] = nightly["schedules"]
    assert schedule["cron"] == CRON == serve_module.NIGHTLY_CRON
    assert schedule["timezone"] == "{{ schedule-timezone.stdout }}"
    assert schedule.get("active", True) is True
    assert nightly["concurrency_limit"] == {"limit": 1, "collision_strategy": "CANCEL_NEW"}
    ConcurrencyLimitStrategy(nightly["concurrency_limit"]["collision_strategy"])


def test_backfill_has_no_schedule(deployments):
    assert deployments["on-demand"]["schedules"] == []
    assert deployments["on-demand"]["concurrency_limit"]["limit"] == 1


def run_build_steps(config, env: dict[str, str]) -> dict:
    """Prefect's own step runner on the file's build steps, in the repository root.
    Its templating asks a Prefect API for blocks and variables: the callers take the
    suite's server (prefect_server), whose start waits as long as the machine needs;
    without one Prefect starts an ephemeral server that gives up after 20 s (it did on
    a loaded machine)."""
    from prefect.deployments.steps.core import run_steps

    saved_env, cwd = dict(os.environ), os.getcwd()
    os.environ.pop("JUDGEFLOW_SCHEDULE_TIMEZONE", None)
    os.environ.update(env)
    os.chdir(REPO)
    try:
        return asyncio.run(run_steps(config["build"], print_function=lambda *a, **k: None))
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def test_the_schedule_timezone_defaults_to_utc_and_follows_the_environment(config, prefect_server):
    from prefect.utilities.templating import apply_values

    [schedule] = next(d for d in config["deployments"] if d["name"] == "nightly")["schedules"]
    outputs = run_build_steps(config, {})
    assert apply_values(schedule, outputs)["timezone"] == "UTC"
    outputs = run_build_steps(config, {"JUDGEFLOW_SCHEDULE_TIMEZONE": "Europe/Berlin"})
    assert apply_values(schedule, outputs)["timezone"] == "Europe/Berlin"
    assert serve_module.DEFAULT_TIMEZONE == "UTC"


def test_the_worker_runs_the_flows_from_the_checkout_deploy_ran_in(config, prefect_server):
    from prefect.utilities.templating import apply_values

    outputs = run_build_steps(config, {})
    [pull] = apply_values(config["pull"], outputs)
    assert Path(pull["prefect.deployments.steps.set_working_directory"]["directory"]).resolve() == REPO


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_process_work_pool_and_job_variables(deployments, name):
    from prefect.workers.process import ProcessWorker

    pool = deployments[name]["work_pool"]
    assert pool["name"] == POOL
    variables = ProcessWorker.get_default_base_job_template()["variables"]["properties"]
    assert set(pool["job_variables"]) <= set(variables)
    assert pool["job_variables"]["env"] == {
        "PREFECT_LOGGING_EXTRA_LOGGERS": "judgeflow",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def deployment_docs() -> str:
    """The deployment page (the README links to it)."""
    return (REPO / "docs" / "deployment.md").read_text()


def test_the_docs_state_this_schedule_and_the_commands():
    text = deployment_docs()
    assert f"`{CRON}`" in text and "UTC" in text and "JUDGEFLOW_SCHEDULE_TIMEZONE" in text
    assert f"prefect work-pool create {POOL} --type process" in text
    assert "prefect deploy --prefect-file deployments/prefect.yaml --all" in text
    assert f"prefect worker start --pool {POOL}" in text
    assert "judgeflow serve" in text
    assert "not built in CI" in text


# --- `prefect deploy` itself, against the test Prefect server ------------------
def prefect_deploy(api_url: str, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "JUDGEFLOW_"))}
    full_env.update(PREFECT_API_URL=api_url, PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
                    LITELLM_LOCAL_MODEL_COST_MAP="True", **env)
    # the test server asks every client for its auth string (judgeflow's local server does)
    if os.environ.get("PREFECT_API_AUTH_STRING"):
        full_env.setdefault("PREFECT_API_AUTH_STRING", os.environ["PREFECT_API_AUTH_STRING"])
    prefect = str(Path(sys.executable).with_name("prefect"))
    return subprocess.run(
        [prefect, "--no-prompt", "deploy", "--prefect-file", "deployments/prefect.yaml", *args],
        cwd=REPO, env=full_env, capture_output=True, text=True, timeout=180,
    )


def ensure_process_pool() -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=POOL, type="process"))
        except ObjectAlreadyExists:
            pass
        assert client.read_work_pool(POOL).type == "process"


def read_deployment(name: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_deployment_by_name(name)


def test_prefect_deploy_all_registers_the_deployments(prefect_server, tmp_path):
    ensure_process_pool()

    done = prefect_deploy(prefect_server, tmp_path, "--all")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    nightly = read_deployment("score-new-traces/nightly")
    assert nightly.entrypoint == "flows/scoring.py:score_new_traces"
    assert nightly.work_pool_name == POOL
    [schedule] = nightly.schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone, schedule.active) == (CRON, "UTC", True)
    assert nightly.global_concurrency_limit.limit == 1
    assert nightly.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    assert nightly.parameters == serve_module.NIGHTLY_PARAMETERS
    assert nightly.enforce_parameter_schema
    assert nightly.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]
    assert nightly.job_variables["env"]["PREFECT_LOGGING_EXTRA_LOGGERS"] == "judgeflow"
    assert set(nightly.parameter_openapi_schema["properties"]) >= {"batch_size", "limit", "since", "metrics"}

    backfill = read_deployment("backfill-traces/on-demand")
    assert backfill.entrypoint == "flows/backfill.py:backfill_traces"
    assert backfill.schedules == []
    assert backfill.parameter_openapi_schema["required"] == ["since", "until"]
    assert backfill.concurrency_options.collision_strategy.value == "ENQUEUE"

    shards = read_deployment("score-shard/shards")
    assert shards.entrypoint == "flows/shards.py:score_shard"
    assert shards.work_pool_name == POOL and shards.schedules == []
    assert shards.global_concurrency_limit is None  # prefect#16027: no limit on children

    # the timezone comes from the environment of `prefect deploy`; redeploying replaces the schedule
    done = prefect_deploy(prefect_server, tmp_path, "--name", "nightly", JUDGEFLOW_SCHEDULE_TIMEZONE="America/New_York")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [schedule] = read_deployment("score-new-traces/nightly").schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone) == (CRON, "America/New_York")
