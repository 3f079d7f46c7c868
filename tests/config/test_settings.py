import pytest

from judgeflow.errors import ConfigError
from judgeflow.config.settings import load_settings, normalise_database_url, parse_duration


def test_defaults_follow_the_issue(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.judge_model == "gpt-4o"
    assert s.metric("toxicity").threshold == 0.5 and s.metric("hallucination").threshold == 0.5
    assert s.metric("toxicity").rate_max == 0.05 and s.alert_min_samples == 50 and s.alert_window == "24h"
    assert s.metric("hallucination").rate_max is None and not s.metric("toxicity").strict_mode
    assert s.metric("toxicity").max_opinions == 50
    assert s.metric("toxicity").regression_min_increase is None is s.metric("hallucination").regression_min_increase
    assert s.uses_embedded_database


# every per-metric variable judgeflow had before metrics declared their own settings, and where it lands
METRIC_VARIABLES = {
    "JUDGEFLOW_TOXICITY_THRESHOLD": ("toxicity", "threshold", "0.25", 0.25),
    "JUDGEFLOW_TOXICITY_STRICT_MODE": ("toxicity", "strict_mode", "true", True),
    "JUDGEFLOW_HALLUCINATION_THRESHOLD": ("hallucination", "threshold", "0.75", 0.75),
    "JUDGEFLOW_TOXICITY_RATE_MAX": ("toxicity", "rate_max", "0.2", 0.2),
    "JUDGEFLOW_HALLUCINATION_RATE_MAX": ("hallucination", "rate_max", "0.3", 0.3),
    "JUDGEFLOW_TOXICITY_REGRESSION_MIN_INCREASE": ("toxicity", "regression_min_increase", "0.02", 0.02),
    "JUDGEFLOW_HALLUCINATION_REGRESSION_MIN_INCREASE": ("hallucination", "regression_min_increase", "0.04", 0.04),
    "JUDGEFLOW_MAX_OPINIONS": ("toxicity", "max_opinions", "7", 7),
}


@pytest.mark.parametrize("where", ["environment", ".env"])
def test_every_per_metric_variable_keeps_its_name(where, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    if where == ".env":
        (tmp_path / ".env").write_text("".join(f"{k}={raw}\n" for k, (_, _, raw, _) in METRIC_VARIABLES.items()))
    else:
        for variable, (_, _, raw, _) in METRIC_VARIABLES.items():
            monkeypatch.setenv(variable, raw)
    s = load_settings()
    for variable, (metric, field, _, value) in METRIC_VARIABLES.items():
        assert getattr(s.metric(metric), field) == value, variable


def test_the_environment_wins_over_dotenv_and_arguments_over_both(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("JUDGEFLOW_TOXICITY_THRESHOLD=0.1\nJUDGEFLOW_HALLUCINATION_THRESHOLD=0.2\n")
    monkeypatch.setenv("JUDGEFLOW_TOXICITY_THRESHOLD", "0.3")
    s = load_settings()
    assert (s.metric("toxicity").threshold, s.metric("hallucination").threshold) == (0.3, 0.2)
    s = load_settings(toxicity_threshold=0.4)
    assert (s.metric("toxicity").threshold, s.metric("hallucination").threshold) == (0.4, 0.2)


def test_settings_of_an_unknown_metric_are_refused(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="unknown metric.*nope.*registered: toxicity, toxicity_session, hallucination"):
        load_settings(metric_settings={"nope": {"threshold": 0.1}})
    with pytest.raises(ConfigError, match="no settings for metric 'nope'"):
        load_settings().metric("nope")


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
    with pytest.raises(ConfigError, match="toxicity_threshold: Input should be less than or equal to 1"):
        load_settings()
    monkeypatch.setenv("JUDGEFLOW_TOXICITY_THRESHOLD", "0.5")
    monkeypatch.setenv("JUDGEFLOW_MAX_OPINIONS", "0")
    with pytest.raises(ConfigError, match="max_opinions: Input should be greater than or equal to 1"):
        load_settings()
    monkeypatch.delenv("JUDGEFLOW_MAX_OPINIONS")
    monkeypatch.delenv("JUDGEFLOW_TOXICITY_THRESHOLD")
    monkeypatch.setenv("JUDGEFLOW_ALERT_WINDOW", "yesterday")
    with pytest.raises(ConfigError, match="duration"):
        load_settings()


def test_batch_settings_reach_the_judge_config(monkeypatch, tmp_path):
    from judgeflow.judge.config import JudgeConfig

    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert (s.judge_batch, s.judge_batch_discount) == (False, 0.5)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_BATCH", "true")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_BATCH_DISCOUNT", "0.4")
    s = load_settings()
    assert s.judge_batch is True and JudgeConfig.from_settings(s).batch_discount == 0.4
    for bad, message in (("0", "greater than 0"), ("1.5", "less than or equal to 1")):
        monkeypatch.setenv("JUDGEFLOW_JUDGE_BATCH_DISCOUNT", bad)
        with pytest.raises(ConfigError, match=rf"judge_batch_discount\s+Input should be {message}"):
            load_settings()


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("6h", 21600), ("7d", 604800), ("1.5h", 5400)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration():
    with pytest.raises(ConfigError):
        parse_duration("6 hours")
