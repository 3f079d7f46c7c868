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
