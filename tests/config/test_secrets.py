"""Secrets from Prefect Secret blocks on the test Prefect server, as well as from env."""

from __future__ import annotations

import uuid

import pytest
from pydantic import SecretStr

from judgeflow.errors import ConfigError
from judgeflow.config.secrets import resolve_secrets, secret_fields, secret_references
from judgeflow.config.settings import Settings, load_settings


def save_secret(value) -> str:
    from prefect.blocks.system import Secret

    name = f"judgeflow-test-{uuid.uuid4().hex[:10]}"
    Secret(value=value).save(name, _sync=True)
    return name


def make(**values) -> Settings:
    return Settings(_env_file=None, **values)


def test_the_secret_settings_are_the_secretstr_fields():
    assert {"database_url", "judge_api_key", "alert_webhook_url", "alert_webhook_secret",
            "alert_slack_webhook_url"} <= set(secret_fields(Settings))
    # JUDGEFLOW_SESSION_KEY names a metadata key (issue 57 names it so): no credential
    not_secret = {"session_key"}
    for name in Settings.model_fields:  # a secret-looking setting that is not a SecretStr would be missed
        if name.endswith(("_key", "_secret", "_password", "_token")) and name not in not_secret:
            assert name in secret_fields(Settings), name


def test_every_secret_setting_resolves_from_a_block(prefect_server):
    blocks = {
        "judge_api_key": ("sk-from-block-1234", "sk-from-block-1234"),
        "alert_webhook_secret": ("whsec-from-block", "whsec-from-block"),
        "alert_webhook_url": ("https://hooks.example.com/a?token=t0k", "https://hooks.example.com/a?token=t0k"),
        "alert_slack_webhook_url": ("https://hooks.slack.com/services/T/B/x", "https://hooks.slack.com/services/T/B/x"),
        # a URL from a block is normalised like one from the environment
        "database_url": ("postgres://app:pw@db.internal:5432/app", "postgresql+psycopg://app:pw@db.internal:5432/app"),
    }
    refs = {field: f"prefect-secret://{save_secret(stored)}" for field, (stored, _) in blocks.items()}
    settings = make(judge_model="openai/x", toxicity_threshold=0.3, **refs)
    assert set(secret_references(settings)) == set(blocks)

    resolved = resolve_secrets(settings)

    for field, (_, expected) in blocks.items():
        value = getattr(resolved, field)
        assert isinstance(value, SecretStr) and value.get_secret_value() == expected, field
    assert resolved.judge_model == "openai/x" and resolved.metric("toxicity").threshold == 0.3  # the rest is kept
    assert secret_references(resolved) == {}
    shown = repr(resolved) + str(resolved) + resolved.model_dump_json()
    for _, expected in blocks.values():
        assert expected not in shown


def test_values_from_the_environment_are_used_as_they_are(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_API_KEY", "sk-plain-from-env")
    settings = load_settings()
    # no reference: Prefect is not even asked (no server in this test)
    assert resolve_secrets(settings) is settings
    assert settings.judge_api_key.get_secret_value() == "sk-plain-from-env"


def test_env_and_blocks_mix(prefect_server, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    name = save_secret("whsec-mixed")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_API_KEY", "sk-plain-from-env")
    monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_SECRET", f"prefect-secret://{name}")
    resolved = resolve_secrets(load_settings())
    assert resolved.judge_api_key.get_secret_value() == "sk-plain-from-env"
    assert resolved.alert_webhook_secret.get_secret_value() == "whsec-mixed"


def test_a_missing_block_names_the_variable_and_the_block(prefect_server):
    settings = make(judge_api_key="prefect-secret://no-such-block-xyz")
    with pytest.raises(ConfigError) as caught:
        resolve_secrets(settings)
    message = str(caught.value)
    assert "JUDGEFLOW_JUDGE_API_KEY" in message and "'no-such-block-xyz'" in message and "does not exist" in message


def test_a_block_that_does_not_hold_a_string_is_refused(prefect_server):
    name = save_secret({"key": "sk-in-a-dict"})
    with pytest.raises(ConfigError, match="must hold a non-empty string") as caught:
        resolve_secrets(make(alert_webhook_secret=f"prefect-secret://{name}"))
    assert "sk-in-a-dict" not in str(caught.value)


def test_a_reference_without_a_name_is_refused():
    with pytest.raises(ConfigError, match="needs a block name"):
        resolve_secrets(make(judge_api_key="prefect-secret://"))


def test_an_unreachable_prefect_api_is_a_clear_error():
    def unreachable(name):
        raise ConnectionError("connection refused")

    with pytest.raises(ConfigError, match="JUDGEFLOW_DATABASE_URL.*'db-url'.*could not be read: ConnectionError"):
        resolve_secrets(make(database_url="prefect-secret://db-url"), loader=unreachable)


def test_secrets_does_not_import_the_settings_module():
    """One direction: the settings loader calls the secrets resolver, which
    works on any model with SecretStr fields (no import cycle)."""
    import subprocess
    import sys

    code = (
        "import sys, judgeflow.config.secrets; "
        "assert 'judgeflow.config.settings' not in sys.modules, sorted(m for m in sys.modules if m.startswith('judgeflow'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
