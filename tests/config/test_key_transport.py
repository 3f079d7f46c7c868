"""No key over plain http:// to a host other than this machine: refused at start."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from judgeflow.cli import app
from judgeflow.errors import ConfigError
from judgeflow.config.key_transport import is_loopback, refuse_plain_http_key
from judgeflow.config.settings import load_settings
from tests.support.addresses import non_loopback_address
from tests.support.judge_server import JudgeServer
from tests.support.traces import insert_traces, scripted_trace

runner = CliRunner()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.3.2.1", "[::1]", "api.localhost"])
def test_loopback_hosts(host):
    assert is_loopback(host.strip("[]")) and is_loopback(host)


@pytest.mark.parametrize("url", ["http://192.0.2.7/v1", "http://judge.example.com/v1", "http://[fd00::2]:80/",
                                 "http://127.0.0.1.evil.example/"])
def test_a_key_over_plain_http_to_another_host_is_refused(url):
    with pytest.raises(ConfigError, match="JUDGEFLOW_JUDGE_API_KEY would be sent over plain http://"):
        refuse_plain_http_key(url, key_setting="JUDGEFLOW_JUDGE_API_KEY", url_setting="JUDGEFLOW_JUDGE_API_BASE")


@pytest.mark.parametrize("url", ["https://judge.example.com/v1", "http://127.0.0.1:4000/v1", "http://localhost/"])
def test_https_and_loopback_are_allowed(url):
    refuse_plain_http_key(url, key_setting="k", url_setting="u")


def test_a_named_private_host_is_allowed():
    refuse_plain_http_key("http://phoenix:6006", key_setting="k", url_setting="u", allowed_hosts=["litellm", "phoenix"])
    with pytest.raises(ConfigError):
        refuse_plain_http_key("http://phoenix2:6006", key_setting="k", url_setting="u", allowed_hosts=["phoenix"])


def test_the_refusal_does_not_print_credentials_of_the_url():
    with pytest.raises(ConfigError) as info:
        refuse_plain_http_key("http://user:hunter2pass@judge.example.com/v1?api-key=zzzsecret", key_setting="k",
                              url_setting="JUDGEFLOW_JUDGE_API_BASE")
    assert "hunter2pass" not in str(info.value) and "zzzsecret" not in str(info.value)


def test_phoenix_write_back_with_a_key_over_plain_http_is_refused_at_start(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_PHOENIX_WRITE_BACK", "true")
    monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", "http://phoenix.example.com:6006")
    monkeypatch.setenv("JUDGEFLOW_PHOENIX_API_KEY", "phx-key-123456")
    with pytest.raises(ConfigError, match="JUDGEFLOW_PHOENIX_API_KEY would be sent over plain http://"):
        load_settings()
    monkeypatch.setenv("JUDGEFLOW_PLAIN_HTTP_KEY_HOSTS", "phoenix.example.com")
    assert load_settings().phoenix_url == "http://phoenix.example.com:6006"
    monkeypatch.delenv("JUDGEFLOW_PLAIN_HTTP_KEY_HOSTS")
    monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", "https://phoenix.example.com")
    load_settings()
    monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", "http://phoenix.example.com:6006")
    monkeypatch.delenv("JUDGEFLOW_PHOENIX_API_KEY")  # no key: nothing to protect
    load_settings()


def test_a_judge_on_another_host_over_plain_http_gets_no_key_and_the_run_does_not_start(
    judgeflow_env, db, monkeypatch,
):
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no address other than loopback")
    insert_traces(db, [scripted_trace(i)[0] for i in range(3)])  # work the judge would be asked about
    with JudgeServer(host=address) as remote:
        monkeypatch.setenv("JUDGEFLOW_JUDGE_API_BASE", remote.url)
        monkeypatch.setenv("JUDGEFLOW_JUDGE_API_KEY", "sk-production-key-0001")
        result = runner.invoke(app, ["score"])
        assert result.exit_code == 2, result.output
        assert "JUDGEFLOW_JUDGE_API_KEY would be sent over plain http://" in result.output
        assert "sk-production-key-0001" not in result.output
        assert remote.calls() == 0


# --- the base and key litellm would use, whatever variable they come from ----------------
def _judge_settings(**values):
    from judgeflow.config.settings import Settings

    return Settings(_env_file=None, **values)


@pytest.mark.parametrize("settings_values, environ, named", [
    # OPENAI_API_KEY is the key litellm sends when JUDGEFLOW_JUDGE_API_KEY is unset
    ({"judge_model": "openai/x", "judge_api_base": "http://judge.example.com/v1"},
     {"OPENAI_API_KEY": "sk-operator-0001"}, "OPENAI_API_KEY"),
    # no JUDGEFLOW_JUDGE_API_BASE: litellm takes OPENAI_API_BASE (or OPENAI_BASE_URL)
    ({"judge_model": "openai/x", "judge_api_key": "sk-operator-0001"},
     {"OPENAI_API_BASE": "http://judge.example.com/v1"}, "OPENAI_API_BASE"),
    ({"judge_model": "gpt-4o", "judge_api_key": "sk-operator-0001"},
     {"OPENAI_BASE_URL": "http://judge.example.com/v1"}, "OPENAI_BASE_URL"),
    # another provider's variables
    ({"judge_model": "hosted_vllm/x"},
     {"HOSTED_VLLM_API_BASE": "http://10.1.2.3:8000/v1", "HOSTED_VLLM_API_KEY": "vllm-key-0001"},
     "HOSTED_VLLM_API_KEY"),
    ({"judge_model": "azure/x"},
     {"AZURE_API_BASE": "http://azure.example.com", "AZURE_API_KEY": "0123456789abcdef"}, "AZURE_API_BASE"),
])
def test_a_key_from_any_variable_to_a_base_from_any_variable_is_refused(settings_values, environ, named):
    from judgeflow.config.key_transport import check_key_destinations

    with pytest.raises(ConfigError, match="would be sent over plain http://") as info:
        check_key_destinations(_judge_settings(**settings_values), environ)
    assert named in str(info.value)
    assert "sk-operator-0001" not in str(info.value) and "vllm-key-0001" not in str(info.value)
    # the operator's word for a private network, https, or no key at all: allowed
    host = "10.1.2.3" if "HOSTED_VLLM_API_BASE" in environ else (
        "azure.example.com" if "AZURE_API_BASE" in environ else "judge.example.com")
    check_key_destinations(_judge_settings(**settings_values, plain_http_key_hosts=host), environ)
    secure = {k: v.replace("http://", "https://") for k, v in environ.items()}
    check_key_destinations(_judge_settings(**{k: v.replace("http://", "https://") for k, v in settings_values.items()}),
                           secure)
    keyless = {k: v for k, v in environ.items() if not k.endswith("_KEY")}
    check_key_destinations(_judge_settings(**{k: v for k, v in settings_values.items() if k != "judge_api_key"}),
                           keyless)


def test_the_configured_base_wins_over_the_providers_variables():
    from judgeflow.config.key_transport import check_key_destinations

    # litellm's api_base argument wins: OPENAI_API_BASE is not where the key goes
    check_key_destinations(_judge_settings(judge_model="openai/x", judge_api_base="https://judge.example.com/v1",
                                           judge_api_key="sk-operator-0001"),
                           {"OPENAI_API_BASE": "http://elsewhere.example.com/v1"})
    # the offline judge sends nothing anywhere
    check_key_destinations(_judge_settings(judge_model="offline"),
                           {"OPENAI_API_BASE": "http://elsewhere.example.com/v1", "OPENAI_API_KEY": "sk-x-000001"})
    # Prefect's and judgeflow's own variables are not litellm's
    check_key_destinations(_judge_settings(judge_model="openai/x", judge_api_key="sk-operator-0001"),
                           {"PREFECT_API_URL": "http://prefect-server:4200/api"})
    # nor is every *_KEY: Python's images set GPG_KEY; a key-less judge on a private base stays allowed
    check_key_destinations(_judge_settings(judge_model="hosted_vllm/x", judge_api_base="http://vllm:8000/v1"),
                           {"GPG_KEY": "A035C8C19219BA821ECEA86B64E628F8D684696D"})


def test_a_key_in_the_dotenv_litellm_loads_counts(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name in ("OPENAI_API_KEY", "OPENAI_API_BASE", "OPENAI_BASE_URL", "JUDGEFLOW_JUDGE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv-0001\n")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/x")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_API_BASE", "http://judge.example.com/v1")
    with pytest.raises(ConfigError, match="OPENAI_API_KEY would be sent over plain http://"):
        load_settings()


def test_the_phoenix_key_is_refused_with_write_back_off_too(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JUDGEFLOW_PHOENIX_WRITE_BACK", raising=False)
    monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", "http://phoenix.example.com:6006")
    monkeypatch.setenv("JUDGEFLOW_PHOENIX_API_KEY", "phx-key-123456")
    with pytest.raises(ConfigError, match="JUDGEFLOW_PHOENIX_API_KEY would be sent over plain http://"):
        load_settings()


def _remote_or_skip() -> str:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no address other than loopback")
    return address


@pytest.mark.parametrize("variables", [
    {"JUDGEFLOW_JUDGE_API_KEY": None, "OPENAI_API_KEY": "sk-production-key-0001", "base": "JUDGEFLOW_JUDGE_API_BASE"},
    {"JUDGEFLOW_JUDGE_API_KEY": "sk-production-key-0001", "base": "OPENAI_API_BASE"},
], ids=["OPENAI_API_KEY", "OPENAI_API_BASE"])
def test_no_key_reaches_a_plain_http_judge_on_another_host_whatever_its_variable(
    judgeflow_env, db, monkeypatch, variables, prefect_server,
):
    from tests.support.key_recorder import KeyRecorder

    address = _remote_or_skip()
    insert_traces(db, [scripted_trace(i)[0] for i in range(2)])
    with KeyRecorder(address) as remote:
        monkeypatch.delenv("JUDGEFLOW_JUDGE_API_BASE")
        monkeypatch.setenv(variables["base"], remote.url + "/v1")
        for name, value in variables.items():
            if name == "base":
                continue
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        result = runner.invoke(app, ["score", "--no-alerts"])
        assert result.exit_code == 2, result.output
        assert "would be sent over plain http://" in result.output
        assert "sk-production-key-0001" not in result.output
        assert remote.arrivals == []
        # the control: with the host named as private, the key does arrive there
        monkeypatch.setenv("PREFECT_API_URL", prefect_server)
        monkeypatch.setenv("JUDGEFLOW_PLAIN_HTTP_KEY_HOSTS", address)
        monkeypatch.setenv("JUDGEFLOW_JUDGE_MAX_RETRIES", "0")
        runner.invoke(app, ["score", "--no-alerts", "--limit", "1"])
        assert any("sk-production-key-0001" in key for key in remote.keys_seen()), remote.arrivals


def test_phoenix_sync_sends_no_key_to_a_plain_http_phoenix_on_another_host(judgeflow_env, monkeypatch):
    from tests.support.key_recorder import KeyRecorder

    address = _remote_or_skip()
    with KeyRecorder(address) as remote:
        monkeypatch.setenv("JUDGEFLOW_SOURCE", "phoenix")
        monkeypatch.setenv("JUDGEFLOW_PHOENIX_URL", remote.url)
        monkeypatch.setenv("JUDGEFLOW_PHOENIX_API_KEY", "phx-secret-key-0001")
        result = runner.invoke(app, ["phoenix", "sync"])
        assert result.exit_code == 2, result.output
        assert "JUDGEFLOW_PHOENIX_API_KEY would be sent over plain http://" in result.output
        assert remote.arrivals == []


def test_shadow_sends_no_key_to_a_candidate_whose_base_comes_from_the_environment(judgeflow_env, db, monkeypatch):
    from tests.support.key_recorder import KeyRecorder

    address = _remote_or_skip()
    insert_traces(db, [scripted_trace(i)[0] for i in range(2)])
    with KeyRecorder(address) as remote:
        # production judges offline; the candidate is a provider's model with no base of judgeflow's:
        # litellm would take the provider's variables
        monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "offline")
        monkeypatch.delenv("JUDGEFLOW_JUDGE_API_BASE")
        monkeypatch.delenv("JUDGEFLOW_JUDGE_API_KEY")
        monkeypatch.setenv("HOSTED_VLLM_API_BASE", remote.url + "/v1")
        monkeypatch.setenv("HOSTED_VLLM_API_KEY", "vllm-secret-key-0001")
        result = runner.invoke(app, ["shadow", "--judge-model", "hosted_vllm/candidate", "--since", "30d", "--yes"])
        assert result.exit_code == 2, result.output
        assert "would be sent over plain http://" in result.output and "HOSTED_VLLM" in result.output
        assert "vllm-secret-key-0001" not in result.output
        assert remote.arrivals == []
