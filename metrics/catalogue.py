"""The registry as the settings read it, and the metrics a process serves.

:data:`CATALOGUE` is what the one door (:func:`judgeflow.run.metric_door.open_metrics`)
hands the settings (:mod:`judgeflow.config.metric_catalogue`), so that the settings
read each metric's settings without importing a metric: the fixed metrics (built-ins
and plugins) and a metrics file's, checked, without serving them. :func:`serve`
is the registry's side of the door: the entry points' metrics, then a metrics
file's in place of those served before.
"""

from __future__ import annotations

from pathlib import Path

from judgeflow.metrics.geval.file import load_metrics_file
from judgeflow.metrics.registry import MetricSpec, origin_of, registered, serve_file_metrics, with_rates


class RegistryCatalogue:
    """The metric registry, read only."""

    def fixed(self) -> dict[str, MetricSpec]:
        """The built-ins and plugins, in registration order, each trace metric followed by its session
        rate (whose settings and rules are read as a metric's)."""
        return with_rates({name: spec for name, spec in registered().items() if origin_of(name) != "file"})

    def file_metrics(self, path: str | Path) -> dict[str, MetricSpec]:
        """Metrics file ``path``'s metrics, every field checked, with their session rates; nothing is served."""
        return with_rates({spec.name: spec for spec in load_metrics_file(path)})


CATALOGUE = RegistryCatalogue()


def serve(metrics_file: str | Path | None) -> tuple[MetricSpec, ...]:
    """Serve the built-ins and plugins (read once per process) and the metrics of
    ``metrics_file`` (None: none), in place of any metrics file's served before."""
    path = None if metrics_file is None or str(metrics_file) == "" else str(metrics_file)
    specs = () if path is None else load_metrics_file(path)
    serve_file_metrics(specs, path)
    return specs
