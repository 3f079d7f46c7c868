"""Which traces of a stratum are judged: the ``n`` with the smallest hash of
(night, trace id). A rerun of the same night picks the same traces; another
night draws afresh, so no trace is left out night after night by its id."""

from __future__ import annotations

import hashlib
from datetime import date
from typing import Iterable


def selection_key(trace_id: str, night: date) -> bytes:
    return hashlib.sha256(f"{night.isoformat()}\x00{trace_id}".encode()).digest()


def select(trace_ids: Iterable[str], n: int, night: date) -> set[str]:
    """The ``n`` ids of ``trace_ids`` with the smallest selection key."""
    if n <= 0:
        return set()
    ordered = sorted(set(trace_ids), key=lambda t: selection_key(t, night))
    return set(ordered[:n])
