import pytest

from judgeflow.errors import ConfigError
from judgeflow.config.settings import load_settings, normalise_database_url, parse_duration


def test_defaults_follow_the_issue(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.judge_model == "gpt-4o"
    assert s.toxicity_threshold == 0.5 and s.hallucination_threshold == 0.5
    assert s.toxicity_rate_max == 0.05 and s.alert_min_samples == 50 and s.alert_window == "24h"
    assert s.uses_embedded_database


@pytest.mark.parametrize(
    "given, expected",
    [
        ("postgres://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgresql://u@h:5/db", "postgresql+psycopg://u@h:5/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
    ],
)
def test_database_urls_are_normalised_to_psycopg3(given, expected, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert normalise_database_url(given) == expected
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", given)
    assert load_settings().database_url.get_secret_value() == expected


def test_env_and_dotenv_are_read_and_secrets_are_masked(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("JUDGEFLOW_JUDGE_API_KEY=sk-from-dotenv\nJUDGEFLOW_MAX_CONCURRENCY=3\n")
    s = load_settings()
    assert s.judge_api_key.get_secret_value() == "sk-from-dotenv"
    assert s.max_concurrency == 3
    assert "sk-from-dotenv" not in repr(s) and "sk-from-dotenv" not in s.model_dump_json()


def test_invalid_settings_raise_a_config_error_without_the_secret(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_TOXICITY_THRESHOLD", "1.5")
    with pytest.raises(ConfigError, match="toxicity_threshold"):
        load_settings()
    monkeypatch.delenv("JUDGEFLOW_TOXICITY_THRESHOLD")
    monkeypatch.setenv("JUDGEFLOW_ALERT_WINDOW", "yesterday")
    with pytest.raises(ConfigError, match="duration"):
        load_settings()


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("6h", 21600), ("7d", 604800), ("1.5h", 5400)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration():
    with pytest.raises(ConfigError):
        parse_duration("6 hours")
