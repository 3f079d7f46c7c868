"""judgeflow's own metrics as its entry point names them (pyproject.toml, the group
``judgeflow.metrics``), so that a test never lists them by hand: a built-in metric
is added in the files docs/DEVELOPING.md ("Adding a metric") lists, none of them a test."""

from __future__ import annotations

import importlib.metadata

from judgeflow.metrics.registry import ENTRY_POINT_GROUP, OWN_DISTRIBUTION


def _builtin_names() -> tuple[str, ...]:
    names: list[str] = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.dist is not None and entry.dist.metadata["Name"] == OWN_DISTRIBUTION:
            loaded = entry.load()
            names.extend(spec.name for spec in (loaded if isinstance(loaded, (list, tuple)) else (loaded,)))
    return tuple(names)


# in the order the registry serves them
BUILT_IN: tuple[str, ...] = _builtin_names()


def and_rates(*names: str) -> list[str]:
    """``names``, each followed by its session rate, as settings serve them (judgeflow/metrics/registry.py)."""
    return [name for metric in names for name in (metric, f"{metric}_session")]
