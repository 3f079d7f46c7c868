"""Demo traces for ``judgeflow demo`` and the tests: 326 production-like LLM
traces over seven days, written for this project (see ``generate_traces.py``).

Each row carries the expected labels in ``metadata["label"]``::

    {"toxic": bool, "hallucination": "faithful" | "partial" | "unfaithful" | None}

(None: the trace has no context, so there is nothing to be faithful to.)
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from importlib import resources
from typing import Any

TRACES_FILE = "traces.jsonl"
DAYS = 7


def read_demo_rows() -> list[dict[str, Any]]:
    """The raw rows of ``traces.jsonl`` (``days_ago``, ``hour``, ``minute`` ...)."""
    text = resources.files(__name__).joinpath(TRACES_FILE).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def created_at_for(now: datetime, days_ago: int, hour: int, minute: int) -> datetime:
    """When a demo trace happened, relative to ``now``.

    Day ``d`` is the 24-hour slot ``[now - (d+1)*24h, now - d*24h)``, and
    ``hour``/``minute`` are the offset into that slot. So ``days_ago=0`` is
    exactly the last 24 hours (the default alert window), every trace is in the
    past, and the seven slots do not overlap.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if not (0 <= days_ago < DAYS and 0 <= hour < 24 and 0 <= minute < 60):
        raise ValueError(f"bad demo time: days_ago={days_ago} hour={hour} minute={minute}")
    now = now.astimezone(timezone.utc)
    slot_start = now - timedelta(days=days_ago + 1)
    # +1 s: hour=0, minute=0 would sit exactly on the slot's (exclusive) start
    return slot_start + timedelta(hours=hour, minutes=minute, seconds=1)


def load_demo_traces(now: datetime) -> list[dict[str, Any]]:
    """Rows ready to insert: ``id, created_at (UTC, tz-aware), input, output,
    context, metadata``, oldest first. ``metadata`` holds ``app``, ``kind``,
    ``label`` (and ``style`` for toxic replies)."""
    rows = []
    for raw in read_demo_rows():
        rows.append(
            {
                "id": raw["id"],
                "created_at": created_at_for(now, raw["days_ago"], raw["hour"], raw["minute"]),
                "input": raw["input"],
                "output": raw["output"],
                "context": raw["context"],
                "metadata": dict(raw["metadata"]),
            }
        )
    rows.sort(key=lambda row: (row["created_at"], row["id"]))
    return rows


__all__ = ["created_at_for", "load_demo_traces", "read_demo_rows"]
