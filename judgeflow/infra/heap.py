"""The garbage collector's settings for a process that makes thousands of
judge calls: the run's own and each judge worker's.

Python's cyclic collector walks every tracked object of a generation each
time it runs, and the oldest generation holds everything imported: Prefect,
SQLAlchemy and pydantic in the run, litellm and its clients in a worker.
A judge call allocates enough short-lived objects to trigger a young
collection every few calls and, every few hundred, a full one over those
libraries again. :func:`freeze_heap`, called once the libraries are imported
and warmed up, moves what is alive then into the permanent generation
(:func:`gc.freeze`, which the collector never walks; nothing is freed by it
that a collection would have freed, as imported modules live until exit) and
lets more allocations pass between young collections. Reference counting
still frees every object without a cycle at once; cycles are still collected.
This is the one place the collector is tuned; docs/benchmark.md has the CPU
per judge call with and without it.
"""

from __future__ import annotations

import gc

# allocations between young collections (Python's default is 700); the two
# older generations keep their default ratios
YOUNG_THRESHOLD = 10_000


def freeze_heap() -> None:
    """Freeze what is alive now and collect young objects less often (module doc)."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
