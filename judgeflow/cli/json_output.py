"""The JSON every `--json` prints: one writer, so times, numbers and ids read the same in all of them
(times in ISO 8601 with their offset, decimals as numbers, ids as strings)."""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID


def _plain(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, UUID):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "_asdict"):  # a database row
        return value._asdict()
    raise TypeError(f"{type(value).__name__} is not JSON")


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, default=_plain)
