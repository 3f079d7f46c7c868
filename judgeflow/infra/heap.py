"""The garbage collector's settings for a process that makes thousands of
judge calls: the run's own and each judge worker's.

Python's cyclic collector walks every tracked object of a generation each
time it runs, and the oldest generation holds everything imported: Prefect,
SQLAlchemy and pydantic in the run, litellm and its clients in a worker.
A judge call allocates enough short-lived objects to trigger a young
collection every few calls and, every few hundred, a full one over those
libraries again. :func:`settle_heap`, called once the libraries are imported
and warmed up, moves what is alive then into the permanent generation
(:func:`gc.freeze`, which the collector never walks; nothing is freed by it
that a collection would have freed, as imported modules live until exit) and
lets more allocations pass between young collections. Reference counting
still frees every object without a cycle at once; cycles are still collected.
At exit the heap is frozen again, so the interpreter's final collection does
not walk what the run leaves behind either.

This is the one place the collector is tuned, and :func:`settle_heap` is
called at one site per kind of process, the point where that process's
libraries are imported and warm (an earlier call would leave them to be
walked; a later one would let the first judge calls pay for it): a command's
flow run (``run_flow`` in judgeflow/cli/runs.py), the judge workers' fork
server (its preload, judgeflow/judge/pool/fork_server.py) and each judge
worker once its judge is warmed up (judgeflow/judge/pool/worker.py).
docs/benchmark.md has the CPU per judge call with and without it.
"""

from __future__ import annotations

import atexit
import gc

# allocations between young collections (Python's default is 700); the two
# older generations keep their default ratios
YOUNG_THRESHOLD = 10_000


def settle_heap() -> None:
    """Freeze what is alive now, collect young objects less often, and freeze
    again at exit (module doc). Calling it again freezes again; the exit
    handler stays one."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
