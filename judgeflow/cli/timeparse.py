"""Time arguments as people type them: ISO 8601, or a duration meaning 'ago'."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from judgeflow.errors import ConfigError
from judgeflow.config.settings import is_duration, parse_duration


def parse_when(text: str | None, *, now: datetime | None = None) -> datetime | None:
    """'2026-11-01', '2026-11-01T02:00:00+01:00' or '7d' (7 days ago). Naive times are UTC."""
    if text is None or text == "":
        return None
    now = now or datetime.now(timezone.utc)
    if is_duration(text):
        return now - timedelta(seconds=parse_duration(text))  # ConfigError when too long to be a date
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"not a time: {text!r} (use ISO 8601 like 2026-11-01T00:00 or a duration like 7d)") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
