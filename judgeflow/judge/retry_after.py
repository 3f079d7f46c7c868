"""The HTTP ``Retry-After`` header, as the judge adapter and the alert
webhooks both read it (no litellm or httpx here)."""

from __future__ import annotations

import email.utils
import math
import time


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number (``"1"``, ``"0.5"``) or an HTTP date;
    ``None`` when absent or unreadable, never negative."""
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - time.time()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)
