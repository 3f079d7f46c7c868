"""One row of a source preset (``litellm``, ``phoenix``) as judgeflow's trace:
what every preset does the same way around its own reading of the row.

Trace content is untrusted: a row whose content has an unexpected shape
(:class:`~judgeflow.sources.chat.MalformedChat`) becomes a skipped trace with
the reason, never an error, and metadata without a value is left out (a
segment is never ``None``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, NamedTuple

from judgeflow.sources.chat import MalformedChat
from judgeflow.sources.types import TraceBody


class Reading(NamedTuple):
    """What a preset read from a row's content."""

    input: str | None
    output: str | None
    skip: str | None  # why the trace is not judged, or None
    context: list[str] | None = None


def preset_body(id: str, created_at: datetime, metadata: dict[str, Any], read: Callable[[], Reading], *,
                malformed: str) -> TraceBody:
    """The trace of one row: ``read()`` the content, and a row ``read`` finds
    malformed is skipped as ``"{malformed}: {what is wrong}"``."""
    try:
        reading = read()
    except MalformedChat as exc:
        reading = Reading(None, None, f"{malformed}: {exc}")
    return TraceBody(
        id=id, created_at=created_at, input=reading.input, output=reading.output, context=reading.context,
        metadata={k: v for k, v in metadata.items() if v is not None}, skip=reading.skip,
    )
