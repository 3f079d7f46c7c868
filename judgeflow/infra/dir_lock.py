"""An exclusive lock on a state directory, shared by every judgeflow process on
the machine: the embedded database and the local Prefect server are started
by whichever command comes first, and a second command must wait and reuse
them instead of starting a second copy."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold ``directory/.lock`` exclusively; released when the block ends or the process dies."""
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
