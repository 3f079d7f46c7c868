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

This is the one place the collector is tuned. :func:`settle_heap` is called
where a process's libraries are imported and warm (earlier, they would still
be walked; later, the first judge calls would pay for it), at one site per
kind of process: the judge workers' fork server (its preload,
judgeflow/judge/pool/fork_server.py) and each judge worker once its judge is
warmed up (judgeflow/judge/pool/worker.py). The ``judgeflow`` command's process
has two moments, so two sites: its entry (``main`` in judgeflow/cli/app.py,
every command: the exit handler registered before any library's, so it runs
after them all, and young collections spaced out during the imports), and, when
it runs a flow, the moment the flow is imported (``run_flow`` in
judgeflow/cli/runs.py: the run's collections then skip Prefect and SQLAlchemy).
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
    again at exit (module doc). A second call freezes again and adds a second
    exit freeze: both are cheap (a freeze moves lists, it walks nothing), and
    the first one registered still runs last."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    atexit.register(gc.freeze)
