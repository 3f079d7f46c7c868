"""What PostgreSQL can store: its text and jsonb types reject NUL (U+0000) and
lone UTF-16 surrogates (U+D800..U+DFFF, which have no UTF-8 form). A judge
reply, an opinion, an error message or a raw reply can carry either, so every
row judgeflow writes passes through :func:`storable_row` first."""

from __future__ import annotations

import math
import re
from typing import Any

REPLACEMENT = "\ufffd"
# in a Python str a surrogate code point is always a lone one: json and the
# codecs combine proper pairs into one code point
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
BIGINT_MAX = 2**63 - 1


def storable(value: Any) -> tuple[Any, bool]:
    """``value`` with NUL and lone surrogates replaced by U+FFFD in every
    string (dict keys included, recursively), and whether anything changed."""
    if isinstance(value, str):
        cleaned = _UNSTORABLE.sub(REPLACEMENT, value)
        return cleaned, cleaned is not value and cleaned != value
    if isinstance(value, dict):
        altered = False
        out = {}
        for key, item in value.items():
            new_key, key_altered = storable(key) if isinstance(key, str) else (key, False)
            new_item, item_altered = storable(item)
            out[new_key] = new_item
            altered = altered or key_altered or item_altered
        return out, altered
    if isinstance(value, (list, tuple)):
        items = [storable(item) for item in value]
        return [item for item, _ in items], any(changed for _, changed in items)
    return value, False


def storable_count(value: Any) -> int:
    """A non-negative count that fits a bigint column (a judge may report anything)."""
    try:
        number = int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
    return min(max(number, 0), BIGINT_MAX)


def storable_float(value: Any) -> float | None:
    """NaN and infinities have no place in a cost or a latency: stored as NULL."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def storable_row(row: dict, *, text_fields: tuple[str, ...], json_fields: tuple[str, ...]) -> dict:
    """A copy of a result row that PostgreSQL accepts; ``details.text_altered``
    lists the fields whose text was changed to get there."""
    out = dict(row)
    altered: list[str] = []
    for name in text_fields + json_fields:
        if out.get(name) is None:
            continue
        out[name], changed = storable(out[name])
        if changed:
            altered.append(name)
    if altered:
        details = dict(out.get("details") or {})
        details["text_altered"] = {
            "fields": altered,
            "note": "NUL characters and lone surrogates were replaced by U+FFFD: PostgreSQL cannot store them",
        }
        out["details"] = details
    return out
