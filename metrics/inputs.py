"""Normalisation of trace fields before they are put in a prompt.

Trace rows come from production logging, so their fields are not always the
strings a metric expects. The rules here decide, in one place, what can be
scored and how; every metric applies them before building any request, and
the offline judge sees the same normalised values in ``JudgeRequest.fields``.

- ``output`` None raises :class:`InvalidTraceError` ("output is null"): there is
  nothing to judge, and scoring it 0 would hide a logging bug. A non-string
  output is also rejected: guessing which part of a structured object is "the
  answer" is the trace producer's job.
- ``input`` None becomes "": the input only gives the judge context, so a
  missing one makes the judgement less informed, not impossible. Numbers and
  booleans are converted with ``str()``, dicts and lists (e.g. a chat message
  list) with ``json.dumps``.
- ``context``: None, an empty list, or a list whose items are all None mean
  "no context". A single string is wrapped as ``[string]``. Items are coerced
  like the input (None items dropped) and the number of items changed is
  reported as ``notes["context_coerced"]``. Any other type is rejected.
  Blank or whitespace-only items are dropped (counted in
  ``notes["context_blank_dropped"]``): an empty passage supports nothing, so
  keeping it would make the judge mark every statement unsupported. A context
  left empty by that means no context, as in the offline judge.
- Each text field is cut to ``max_field_chars`` characters; the context list
  shares one budget of that size (items kept in order, the one crossing the
  budget cut, the rest dropped) so a context with many items cannot blow up
  the prompt. Original lengths go to ``notes["truncated"]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from judgeflow.errors import ConfigError, InvalidTraceError

DEFAULT_MAX_FIELD_CHARS = 20_000


@dataclass(frozen=True)
class TraceFields:
    """Normalised, truncated trace fields plus notes for ``MetricResult.details``."""

    input: str
    output: str
    context: list[str] | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def output_is_empty(self) -> bool:
        return not self.output.strip()


def check_max_field_chars(max_field_chars: int) -> int:
    if isinstance(max_field_chars, bool) or not isinstance(max_field_chars, int) or max_field_chars < 1:
        raise ConfigError(f"max_field_chars must be a positive integer, got {max_field_chars!r}")
    return max_field_chars


def normalise_trace(
    input: Any,
    output: Any,
    context: Any = None,
    *,
    max_field_chars: int = DEFAULT_MAX_FIELD_CHARS,
) -> TraceFields:
    """Apply the rules in the module docstring; raises :class:`InvalidTraceError`."""
    limit = check_max_field_chars(max_field_chars)
    if output is None:
        raise InvalidTraceError("output is null")
    if not isinstance(output, str):
        raise InvalidTraceError(f"output must be a string, got {type(output).__name__}")
    input_text = "" if input is None else _as_text(input, "input")

    notes: dict[str, Any] = {}
    truncated: dict[str, int] = {}
    input_text = _cut(input_text, limit, "input", truncated)
    output_text = _cut(output, limit, "output", truncated)

    context_items, coerced = _context_items(context)
    if coerced:
        notes["context_coerced"] = coerced
    context_items, blank = _drop_blank(context_items)
    if blank:
        notes["context_blank_dropped"] = blank
    context_items = _cut_context(context_items, limit, truncated)

    if truncated:
        notes["truncated"] = truncated
    return TraceFields(
        input=input_text,
        output=output_text,
        context=context_items or None,
        notes=notes,
    )


def _as_text(value: Any, what: str) -> str:
    # bool is tested with the numbers on purpose: str(True) is what the brief asks.
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, (Mapping, list, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError) as error:  # e.g. circular references
            raise InvalidTraceError(f"{what} cannot be serialised as JSON: {error}") from error
    raise InvalidTraceError(f"{what} must be text, a number, a list or an object, got {type(value).__name__}")


def _context_items(context: Any) -> tuple[list[str], int]:
    """The context as a list of strings, and how many items had to be changed."""
    if context is None:
        return [], 0
    if isinstance(context, str):
        return [context], 0
    if not isinstance(context, (list, tuple)):
        raise InvalidTraceError(
            f"context must be a list of strings, a single string or null, got {type(context).__name__}"
        )
    items: list[str] = []
    coerced = 0
    for index, item in enumerate(context):
        if isinstance(item, str):
            items.append(item)
        elif item is None:
            coerced += 1
        else:
            items.append(_as_text(item, f"context[{index}]"))
            coerced += 1
    return items, coerced


def _drop_blank(items: list[str]) -> tuple[list[str], int]:
    kept = [item for item in items if item.strip()]
    return kept, len(items) - len(kept)


def _cut(text: str, limit: int, name: str, truncated: dict[str, int]) -> str:
    if len(text) <= limit:
        return text
    truncated[name] = len(text)
    return text[:limit]


def _cut_context(items: list[str], limit: int, truncated: dict[str, int]) -> list[str]:
    total = sum(len(item) for item in items)
    if total <= limit:
        return items
    truncated["context"] = total
    kept: list[str] = []
    budget = limit
    for item in items:
        if budget <= 0:
            break
        kept.append(item[:budget])
        budget -= len(kept[-1])
    return kept
