"""The metric registry: every metric the trunk serves, built-in or plugin.

A metric is a :class:`MetricSpec`. The trunk (tasks, flows, the database,
alerts, sampling, calibration, pricing, the CLI) knows metrics only through
this module: it names none of them. Metrics come in through one door,
:func:`register`; the registry, on first use, registers what the entry
points of the group ``judgeflow.metrics`` give (a spec or a sequence of
specs, in order). judgeflow's own two metrics are such an entry point
(pyproject.toml, :mod:`judgeflow.metrics.builtin`), so a plugin is served
exactly as they are.

What a spec declares:

- ``name``: stored with each score, ``--metric``'s value, the prefix of the
  metric's settings (``JUDGEFLOW_<NAME>_THRESHOLD``) and of its alert rules
  (``<name>_rate``, ``<name>_regression``).
- ``steps``: each judge step and the schema its reply is read with.
- ``version``: the prompt hash (:mod:`judgeflow.metrics.version`).
- ``fields``: the trace fields it reads (``input``, ``output``, ``context``).
- ``cost``: how its prompt and reply sizes follow the trace's
  (:class:`CostEstimate`, used by budgets and estimates).
- ``settings``: its own settings model (:class:`MetricSettings`): the
  threshold, its alert rules' limits and whatever else it takes.
- ``build``: the metric object over a judge; its ``ascore(input, output,
  context, judge=...)`` is the one call the engine makes.
- ``offline``: what the offline judge answers for each of its steps
  (``"module:function"``, resolved by :mod:`judgeflow.judge.offline.judge`).
- ``label_words``: how people may write its labels in a calibration set.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from judgeflow.errors import ConfigError
from judgeflow.judge.base import Judge
from judgeflow.metrics.result import MetricResult

ENTRY_POINT_GROUP = "judgeflow.metrics"
TraceField = Literal["input", "output", "context"]
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


class MetricSettings(BaseModel):
    """A metric's own settings. Each field ``f`` of metric ``m`` is the setting
    ``m_f`` (``JUDGEFLOW_M_F`` in the environment), or ``f`` alone when it is
    listed in ``unprefixed``. Subclass it to add fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    threshold: float = Field(0.5, ge=0, le=1, description="scores above it do not pass")
    rate_max: float | None = Field(
        None, ge=0, le=1, description="the <name>_rate alert rule's maximum not-passed rate; unset: off"
    )
    regression_min_increase: float | None = Field(
        None, ge=0, le=1,
        description="the <name>_regression alert rule: absolute rise of the not-passed rate over baseline that "
        "pages; unset: off",
    )

    # fields read without the metric's prefix (a name kept from before the metric had settings of its own)
    unprefixed: ClassVar[frozenset[str]] = frozenset()
    # fields that change a score or its reason, and the key each has in the content hash
    # (judgeflow/run/reuse.py): every other field only decides `passed` or alerts
    score_fields: ClassVar[Mapping[str, str]] = {}
    # constant entries of the metric's content hash: the keys its stored hashes were made with
    hash_constants: ClassVar[Mapping[str, Any]] = {}

    def content_key(self) -> dict[str, Any]:
        """What in these settings a stored score depends on (the content hash's part)."""
        return {**self.hash_constants, **{key: getattr(self, name) for name, key in self.score_fields.items()}}


@dataclass(frozen=True)
class CostEstimate:
    """How one (trace, metric) pair's tokens follow its trace, measured by
    rendering the metric's prompts: prompt characters every pair costs, how
    many times each field is sent, reply tokens every pair costs and the share
    of the output (in tokens) the reply repeats."""

    prompt_overhead_chars: int
    field_weights: Mapping[str, int]
    completion_overhead_tokens: int
    completion_output_share: float = 0.0


@dataclass(frozen=True)
class BuildOptions:
    """What every metric is built with besides its own settings."""

    include_reason: bool = True
    max_field_chars: int = 20_000
    max_repairs: int = 2


class ScoringMetric(Protocol):
    """A built metric, as the engine uses it."""

    name: str

    @property
    def metric_version(self) -> str: ...

    @property
    def effective_threshold(self) -> float: ...

    @property
    def judge_rounds(self) -> int: ...

    async def ascore(self, input: Any, output: Any, context: Any = None, *,
                     judge: Judge | None = None) -> MetricResult: ...


@dataclass(frozen=True, eq=False)
class MetricSpec:
    name: str
    steps: Mapping[str, type[BaseModel]]
    version_of: Callable[[], str]
    fields: tuple[TraceField, ...]
    cost: CostEstimate
    build: Callable[[Judge, Any, BuildOptions], ScoringMetric]
    settings: type[MetricSettings] = MetricSettings
    offline: Mapping[str, str] = field(default_factory=dict)
    # words a calibration label may be written as (lower case) -> whether it means "fails the metric"
    label_words: Mapping[str, bool] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not set(self.name) <= _NAME_CHARS or self.name[0].isdigit():
            raise ConfigError(f"metric name {self.name!r}: lowercase letters, digits and '_' only")
        unknown = set(self.fields) - {"input", "output", "context"}
        if unknown or "output" not in self.fields:
            raise ConfigError(f"metric {self.name}: fields must include 'output' and be input/output/context")

    @property
    def version(self) -> str:
        """The version of its prompts and schemas as the code is now (asked where a run starts and
        records its epochs; a built metric holds its own)."""
        return self.version_of()

    def setting_name(self, field_name: str) -> str:
        """The Settings name (``JUDGEFLOW_`` + upper case in the environment) of one of its fields."""
        return field_name if field_name in self.settings.unprefixed else f"{self.name}_{field_name}"

    def setting_names(self) -> dict[str, str]:
        """Settings name -> field, every field of its settings model."""
        return {self.setting_name(name): name for name in self.settings.model_fields}


# The registered metrics by name, in registration order. Module state on
# purpose: it is the extension point, filled once per process (the entry
# points) and by explicit register() calls, and read-only afterwards.
_REGISTERED: dict[str, MetricSpec] = {}
_loaded = [False]


def register(spec: MetricSpec, *, replace: bool = False) -> MetricSpec:
    """Serve ``spec`` from now on; a second metric of the same name is an
    error unless ``replace``."""
    if not isinstance(spec, MetricSpec):
        raise ConfigError(f"not a metric spec: {spec!r}")
    _load_entry_points()
    if spec.name in _REGISTERED and not replace and _REGISTERED[spec.name] is not spec:
        raise ConfigError(f"metric {spec.name!r} is registered already")
    _REGISTERED[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Serve ``name`` no more (a test's own metric, once it is done)."""
    _REGISTERED.pop(name, None)


def _load_entry_points() -> None:
    if _loaded[0]:
        return
    _loaded[0] = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
        except Exception as error:
            raise ConfigError(f"metric plugin {entry.name} ({entry.value}) could not be loaded: {error}") from error
        for spec in loaded if isinstance(loaded, Sequence) else (loaded,):
            if not isinstance(spec, MetricSpec):
                raise ConfigError(f"metric plugin {entry.value} gave {spec!r}, not a MetricSpec")
            if spec.name in _REGISTERED and _REGISTERED[spec.name] is not spec:
                raise ConfigError(f"metric {spec.name!r} is given by two plugins ({entry.value} and another)")
            _REGISTERED[spec.name] = spec


def registered() -> dict[str, MetricSpec]:
    """Every registered metric by name, in registration order."""
    _load_entry_points()
    if not _REGISTERED:
        raise ConfigError(f"no metric is registered: is judgeflow installed (its {ENTRY_POINT_GROUP!r} "
                          "entry points)? Run ./scripts/setup or pip install -e .")
    return dict(_REGISTERED)


def metric_names() -> tuple[str, ...]:
    return tuple(registered())


def spec_of(name: str) -> MetricSpec:
    """The metric called ``name``; an unknown one is a ConfigError naming the registered ones."""
    specs = registered()
    if name not in specs:
        raise ConfigError(f"unknown metric {name!r}; choose from {', '.join(specs)}")
    return specs[name]


def check_names(names: Sequence[str]) -> list[str]:
    """``names`` if every one is registered; else one ConfigError naming them all."""
    specs = registered()
    unknown = [name for name in names if name not in specs]
    if unknown:
        raise ConfigError(f"unknown metric{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                          f"choose from {', '.join(specs)}")
    return list(names)


def current_versions() -> dict[str, str]:
    """Each registered metric's version as the code is now."""
    return {name: spec.version for name, spec in registered().items()}


def chosen(names: Sequence[str] | None) -> list[str]:
    """The metrics a run or command was given (checked), or every registered one for None."""
    return list(metric_names()) if names is None else check_names(list(names))
