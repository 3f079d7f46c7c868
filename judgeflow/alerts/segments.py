"""A trace's segment: the values of the stored segment keys of its metadata
(``JUDGEFLOW_ALERT_SEGMENT_BY``'s and every served metric's own ``segment_by``:
Settings.stored_segment_keys), as stored in ``eval_results.segment`` when it is scored.

Metadata is untrusted and messy: it may be missing, a JSON string, a list, or
hold objects, NUL characters or megabytes under a key. Only scalar values
become segment values (as text, cut to :data:`VALUE_CHARS`); anything else
leaves the trace out of that key's segments (it still counts overall).
"""

from __future__ import annotations

import json
import re
from typing import Any

VALUE_CHARS = 200
# PostgreSQL's text and jsonb refuse NUL and lone surrogates
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        value = _UNSTORABLE.sub("\ufffd", value).strip()
        return value[:VALUE_CHARS] or None
    return None  # null, objects, arrays: not a segment value


def segment_values(metadata: Any, keys: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``{key: value}`` for each of ``keys`` the metadata holds a scalar for."""
    if not keys or metadata is None:
        return {}
    if isinstance(metadata, (str, bytes)):
        try:
            metadata = json.loads(metadata)
        except (ValueError, UnicodeDecodeError):
            return {}
    if not isinstance(metadata, dict):
        return {}
    found = {}
    for key in keys:
        value = _text(metadata.get(key))
        if value is not None:
            found[key] = value
    return found
