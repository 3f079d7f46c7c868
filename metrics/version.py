"""Metric versions that follow the prompts.

A stored score is only comparable with another if both came from the same
prompts and response schemas. Rather than trusting people to bump a constant,
the version hashes what the judge actually receives: every prompt variant
rendered with fixed probe data (so text inside builder functions counts, not
only module constants) plus the JSON schema of every response model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel


def compute_version(
    name: str, major: int, prompts: Iterable[Any], schemas: Iterable[type[BaseModel]]
) -> str:
    """``"<name>/<major>+<first 8 hex of sha256>"``; ``major`` is bumped by hand
    for changes the hash cannot see, such as a new scoring rule."""
    payload = {
        "prompts": list(prompts),
        "schemas": [schema.model_json_schema() for schema in schemas],
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=True).encode()).hexdigest()
    return f"{name}/{major}+{digest[:8]}"
