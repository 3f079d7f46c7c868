"""What every judge reply model shares: extra keys are accepted and kept.

A judge that adds a key of its own (``"confidence"``, ``"analysis"``) has
still answered; re-asking for that alone would cost a call for nothing. The
models therefore allow extra keys, while the JSON schema sent as the judge's
``response_format`` still says ``additionalProperties: false`` (strict
structured-output APIs require it, and it is what the judge is asked for).
The extra keys are not thrown away either: :func:`reply_extras` collects them
for the metric's ``details``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

# Extra keys of one reply kept whole up to this size (their JSON); beyond it
# only their names are kept: a judge writing its whole analysis into an extra
# key would otherwise store kilobytes per result.
MAX_EXTRA_CHARS = 2000


class ReplyModel(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": False})


def reply_extras(model: BaseModel) -> dict[str, Any]:
    """The keys ``model`` was given beyond its fields, bounded by
    :data:`MAX_EXTRA_CHARS` (``{"keys": [...], "note": ...}`` beyond it);
    empty when there were none. Nested models are not visited: the metric
    stores theirs where it stores the nested item."""
    extra = dict(model.model_extra or {})
    if not extra:
        return {}
    if len(json.dumps(extra, ensure_ascii=False, default=str)) <= MAX_EXTRA_CHARS:
        return extra
    return {"keys": sorted(extra), "note": f"extra keys longer than {MAX_EXTRA_CHARS} characters are not kept"}
