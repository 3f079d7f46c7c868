"""The metrics the settings are read for, as the settings see them.

Each metric has settings of its own (``JUDGEFLOW_<NAME>_<FIELD>``), so the one
:class:`~judgeflow.config.settings.Settings` must know the metrics to read and
validate them; the metrics live above the settings (judgeflow.metrics), so they
are handed down: the entry point's one door
(:func:`judgeflow.run.metric_door.open_metrics`) hands this module the metric
registry's catalogue before any settings are built. Nothing here knows a metric.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from judgeflow.errors import ConfigError


class CataloguedMetric(Protocol):
    """What the settings (and the judge's configuration built from them) read of a metric."""

    @property
    def name(self) -> str: ...

    @property
    def settings(self) -> type[Any]: ...  # its settings model (a pydantic model)

    @property
    def segment_by(self) -> tuple[str, ...] | None: ...

    @property
    def judge_model(self) -> str | None: ...

    @property
    def steps(self) -> Mapping[str, Any]: ...

    @property
    def offline(self) -> Mapping[str, str]: ...

    @property
    def rate_of(self) -> str | None: ...  # a session rate's trace metric (judged by no model); None: judged

    def setting_name(self, field_name: str) -> str: ...

    def setting_names(self) -> dict[str, str]: ...


class MetricCatalogue(Protocol):
    def fixed(self) -> Mapping[str, CataloguedMetric]:
        """The metrics served whatever the settings say (built-ins and plugins), in order."""

    def file_metrics(self, path: str | Path) -> Mapping[str, CataloguedMetric]:
        """The metrics of metrics file ``path``, every field checked (a ConfigError naming the file)."""


# Module state on purpose: one catalogue per process, handed down once by the entry point's door,
# read by every Settings built afterwards (a test's Settings(<name>_threshold=0.3) included).
_CATALOGUE: list[MetricCatalogue | None] = [None]


def use_catalogue(catalogue: MetricCatalogue) -> None:
    _CATALOGUE[0] = catalogue


def catalogue() -> MetricCatalogue:
    if _CATALOGUE[0] is None:
        raise ConfigError("no metrics to read settings for: the entry point opens them first "
                          "(judgeflow.run.metric_door.open_metrics)")
    return _CATALOGUE[0]


def served_metrics(metrics_file: str | Path | None) -> dict[str, CataloguedMetric]:
    """The metrics settings naming ``metrics_file`` serve: the fixed ones, then the file's."""
    fixed = catalogue().fixed()
    if metrics_file is None or str(metrics_file) == "":
        return dict(fixed)
    return {**fixed, **catalogue().file_metrics(metrics_file)}
