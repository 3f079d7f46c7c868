"""Which traces of a stratum are judged: the ``n`` with the smallest hash of
(night, trace id). A rerun of the same night picks the same traces; another
night draws afresh, so no trace is left out night after night by its id.

A trace that arrives after its stratum's plan is judged when its hash, read as
a number in [0, 1) (:func:`unit`), is below the stratum's inclusion
probability: the same chance its stratum's planned traces had, decided the
same deterministic way."""

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


def unit(trace_id: str, night: date) -> float:
    """The trace's selection key as a number uniform in [0, 1)."""
    return int.from_bytes(selection_key(trace_id, night)[:8], "big") / 2**64


def select_below(trace_ids: Iterable[str], prob: float, night: date) -> set[str]:
    """The ids whose :func:`unit` is below ``prob``."""
    return {t for t in set(trace_ids) if unit(t, night) < prob}
