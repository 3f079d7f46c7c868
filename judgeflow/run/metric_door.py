"""The one door metrics come in through, opened by each entry point (a CLI
command, a deployment's flow run, a script) once, before it builds its settings.

The registry (judgeflow/metrics/registry.py) then serves the built-ins and the
entry-point plugins (read once per process) and the metrics file's metrics;
the settings read each metric's settings from the same registry, handed to them
as a catalogue (judgeflow/config/metric_catalogue.py: the settings sit below the
metrics and never import them). Building settings writes nothing to the registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judgeflow.config.metric_catalogue import use_catalogue
from judgeflow.config.settings import Settings, load_settings
from judgeflow.metrics.catalogue import CATALOGUE, serve


def open_metrics(metrics_file: str | Path | None = None) -> None:
    """Serve the built-ins, the plugins and ``metrics_file``'s metrics (None: none, and no file's
    metrics served before), and hand the settings the registry's catalogue."""
    use_catalogue(CATALOGUE)
    serve(metrics_file)


def entry_settings(**overrides: Any) -> Settings:
    """An entry point's settings (:func:`~judgeflow.config.settings.load_settings` with ``overrides``)
    and its metrics, the metrics file they name included, opened through the door."""
    use_catalogue(CATALOGUE)
    settings = load_settings(**overrides)
    open_metrics(settings.metrics_file)
    return settings
