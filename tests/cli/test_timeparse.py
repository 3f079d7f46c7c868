from datetime import datetime, timedelta, timezone

import pytest

from judgeflow.errors import ConfigError
from judgeflow.cli.timeparse import parse_when

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


def test_durations_mean_ago():
    assert parse_when("7d", now=NOW) == NOW - timedelta(days=7)
    assert parse_when("0s", now=NOW) == NOW


def test_iso_times_naive_ones_are_utc():
    assert parse_when("2026-11-01", now=NOW) == datetime(2026, 11, 1, tzinfo=timezone.utc)
    aware = parse_when("2026-11-01T02:00:00+01:00", now=NOW)
    assert aware == datetime(2026, 11, 1, 1, 0, tzinfo=timezone.utc)


def test_empty_is_none_and_garbage_is_a_clear_error():
    assert parse_when(None) is None and parse_when("") is None
    with pytest.raises(ConfigError, match="not a time"):
        parse_when("last tuesday")


@pytest.mark.parametrize("text", ["3000000d", "99999999d", "1e400s".replace("e400", "0" * 20)])
def test_a_duration_too_long_for_a_date_is_one_clear_config_error(text):
    from judgeflow.config.settings import parse_duration

    with pytest.raises(ConfigError, match="duration too long"):
        parse_duration(text)
    with pytest.raises(ConfigError, match="duration too long"):
        parse_when(text)


def test_the_longest_duration_is_still_a_date():
    from judgeflow.config.settings import MAX_DURATION_DAYS

    assert parse_when(f"{MAX_DURATION_DAYS}d").year >= 1900
