"""What the judge workers' fork server loads before it forks any of them
(:mod:`multiprocessing`'s forkserver preload; judgeflow/judge/pool/process_pool.py).

Importing this module is the preload's work: it imports the litellm judge, so
each worker starts with litellm imported once for all of them, then freezes
the fork server's heap (:func:`judgeflow.infra.heap.settle_heap`). Frozen, the heap
is never walked by the collector again: not in the workers, whose copies of
those pages stay shared with the fork server instead of being touched (and
copied) by their collections, and not when the fork server exits with its
run, so it does not linger over a final collection of litellm's objects.
"""

from judgeflow.infra.heap import settle_heap
from judgeflow.judge import litellm_judge  # noqa: F401 - imported for the workers to inherit

settle_heap()
