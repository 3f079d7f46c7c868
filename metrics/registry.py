"""The metric registry: every metric the trunk serves, built-in or plugin.

A metric is a :class:`MetricSpec`. The trunk (tasks, flows, the database,
alerts, sampling, calibration, pricing, the CLI) knows metrics only through
this module: it names none of them. Every metric is written here by one
call, :func:`register`: those the entry points of the group
``judgeflow.metrics`` give (a spec or a sequence of specs, in order; read
once per process, on first use), those of a metrics file (:func:`serve_file_metrics`)
and a plugin registered from code. judgeflow's own two metrics are such an entry point
(pyproject.toml, :mod:`judgeflow.metrics.builtin`), so a plugin is served
exactly as they are. A process opens its metrics once, at its entry point
(:func:`judgeflow.run.metric_door.open_metrics`): the settings read the
metrics' settings from what it serves; building settings writes nothing here.

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
- ``higher_is_better``: a score at or above the threshold passes (a G-Eval
  metric's); otherwise at or below it (the built-ins').
- ``prepare``: what the metric needs from the judge once before it can score
  (:class:`Preparation`: a G-Eval metric's steps written from its criteria);
  the trunk stores it and hands it back on every later run.
- ``judge_model``: a litellm model that judges this metric instead of the
  run's (same endpoint, key, slots and retry loop; priced at its own price);
  None: the run's judge model (:func:`judgeflow.config.judge_models.metric_judge_model`).
- ``segment_by``: the metadata keys its own alert rules (``<name>_rate``,
  ``<name>_regression``) and its trend lines are segmented by, in place of
  ``JUDGEFLOW_ALERT_SEGMENT_BY`` (``()``: overall only); None: those global keys.
- ``level``: what one result judges, a trace (the default) or a session.
- ``rate_of``: a session rate's trace metric (:mod:`judgeflow.metrics.session_rate`):
  every trace metric ``M`` yields ``M_session``, computed from its turns'
  results, never judged; None for a judged metric.

The session rates are not in :func:`registered` (the metrics a run judges):
:func:`reported` adds them, each after its trace metric, for whatever reads
results (settings, alert rules, status, reports, trend). :func:`register`
refuses a metric named as another's session rate.

Each metric has an origin: ``built-in`` (judgeflow's own entry point),
``plugin`` (another distribution's entry point, or :func:`register` from
code) or ``file`` (``JUDGEFLOW_METRICS_FILE``, :func:`serve_file_metrics`).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, create_model

from judgeflow.errors import ConfigError, MetricError
from judgeflow.judge.base import Judge
from judgeflow.metrics.result import MetricResult

if TYPE_CHECKING:
    from judgeflow.metrics.steps import Flow

ENTRY_POINT_GROUP = "judgeflow.metrics"
# the distribution whose entry points are the built-ins
OWN_DISTRIBUTION = "judgeflow"
Origin = Literal["built-in", "plugin", "file"]
TraceField = Literal["input", "output", "context"]
# what a metric judges: one trace, or a session's whole conversation (docs/metrics.md, "Conversations")
Level = Literal["trace", "session"]
LEVELS = ("trace", "session")
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
    rate_on: Literal["judged", "corrected"] = Field(
        "judged",
        description="the rate the <name>_rate rule decides on: judged (what the judge said) or corrected (for "
        "the judge's error measured on people's labels; the judged rate while the labels are not enough)",
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
    # a session metric's conversation budget (JUDGEFLOW_SESSION_MAX_CHARS, judgeflow/metrics/conversation.py)
    session_max_chars: int = 60_000


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


@dataclass(frozen=True)
class Preparation:
    """What a metric needs from the judge once, before it scores anything:
    ``make(max_repairs)`` is the flow of judge requests that makes it (its
    value JSON), ``accept(value)`` hands a made or stored value to the metric,
    ``ready()`` says whether it has one. ``key`` is what the value depends on:
    a stored value is used again while its key is the same."""

    key: str
    make: Callable[[int], "Flow[Any]"]
    accept: Callable[[Any], None]
    ready: Callable[[], bool]


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
    higher_is_better: bool = False
    prepare: Preparation | None = None
    judge_model: str | None = None
    segment_by: tuple[str, ...] | None = None
    # "session": its ``ascore`` gets a session's conversation as ``context`` (a list of
    # {"input", "output"} turns, judgeflow/metrics/conversation.py) and is never paired with a trace
    level: Level = "trace"
    rate_of: str | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise MetricError(f"metric {self.name}: level must be one of {', '.join(LEVELS)}")
        if not self.name or not set(self.name) <= _NAME_CHARS or self.name[0].isdigit():
            raise MetricError(f"metric name {self.name!r}: lowercase letters, digits and '_' only")
        if self.segment_by is not None and (not isinstance(self.segment_by, tuple) or not all(
                isinstance(key, str) and key for key in self.segment_by)):
            raise MetricError(f"metric {self.name}: segment_by must be a tuple of metadata keys, or None")
        unknown = set(self.fields) - {"input", "output", "context"}
        if unknown or "output" not in self.fields:
            raise MetricError(f"metric {self.name}: fields must include 'output' and be input/output/context")

    @property
    def version(self) -> str:
        """The version of its prompts and schemas as the code is now (asked where a run starts and
        records its epochs; a built metric holds its own)."""
        return self.version_of()

    @property
    def unit(self) -> str:
        """What one of its results counts, as status, reports and the run's summary say: sessions or traces."""
        return "sessions" if self.level == "session" else "traces"

    def passes(self, score: float, threshold: float) -> bool:
        """The metric's rule: at or below the threshold passes, or at or above it when higher is better."""
        return score >= threshold if self.higher_is_better else score <= threshold

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
_ORIGINS: dict[str, Origin] = {}
# the file whose metrics are served now (None: none)
_FILE: list[str | None] = [None]
_loaded = [False]
# a trace metric M's session rate is M + this (judgeflow/metrics/session_rate.py)
SESSION_RATE_SUFFIX = "_session"
# stored as each session rate result's metric_version: how the rate is computed
SESSION_RATE_VERSION = "session-rate-1"
# id(trace metric spec) -> (that spec, its session rate's spec): made once per spec
_RATES: dict[int, tuple[MetricSpec, MetricSpec]] = {}


def rate_name(name: str) -> str:
    """The name of trace metric ``name``'s session rate."""
    return name + SESSION_RATE_SUFFIX


def _check_rate_names(spec: MetricSpec, taken: Mapping[str, MetricSpec]) -> None:
    """A metric named as another's session rate, or whose own rate's name is taken, is refused."""
    owners = {rate_name(name): name for name, other in taken.items()
              if other.level == "trace" and other.rate_of is None and other is not spec}
    if spec.name in owners:
        raise MetricError(f"metric {spec.name!r} clashes with the session rate of metric {owners[spec.name]!r} "
                          "(every trace metric M has M_session); choose another name")
    if spec.level == "trace" and rate_name(spec.name) in taken and taken[rate_name(spec.name)] is not spec:
        raise MetricError(f"metric {spec.name!r}: its session rate {rate_name(spec.name)!r} is the name of "
                          "another metric; rename that one")


def register(spec: MetricSpec, *, origin: Origin = "plugin", replace: bool = False) -> MetricSpec:
    """Serve ``spec`` from now on, as a metric of ``origin``: the one writer of
    the registry. A second metric of the same name is an error unless ``replace``."""
    if not isinstance(spec, MetricSpec):
        raise MetricError(f"not a metric spec: {spec!r}")
    _load_entry_points()
    if spec.name in _REGISTERED and not replace and _REGISTERED[spec.name] is not spec:
        raise MetricError(f"metric {spec.name!r} is registered already")
    if spec.rate_of is not None:
        raise MetricError(f"metric {spec.name!r} is a session rate: rates are derived, never registered")
    _check_rate_names(spec, {n: s for n, s in _REGISTERED.items() if n != spec.name})
    _REGISTERED[spec.name] = spec
    _ORIGINS[spec.name] = origin
    return spec


def unregister(name: str) -> None:
    """Serve ``name`` no more (a test's own metric, once it is done)."""
    _REGISTERED.pop(name, None)
    _ORIGINS.pop(name, None)


def origin_of(name: str) -> Origin:
    """Where metric ``name`` came from: built-in, plugin or file."""
    spec_of(name)
    return _ORIGINS.get(name, "plugin")


def serve_file_metrics(specs: Sequence[MetricSpec], path: str | None) -> None:
    """Serve ``specs`` as the metrics of file ``path`` from now on, in place of
    the file metrics served before (a metric no longer in the file is no longer
    scored; its results stay). A name a built-in or plugin already has is a
    ConfigError naming the file."""
    _load_entry_points()
    for spec in specs:
        if spec.name in _REGISTERED and _ORIGINS.get(spec.name) != "file":
            raise MetricError(f"{path}: metric {spec.name!r} clashes with the {_ORIGINS.get(spec.name, 'plugin')} "
                              f"metric of that name; choose another name")
    for name in [name for name, origin in _ORIGINS.items() if origin == "file"]:
        unregister(name)
    for spec in specs:
        register(spec, origin="file")
    _FILE[0] = path if specs else None


def served_file() -> str | None:
    """The metrics file whose metrics are served now, if any."""
    return _FILE[0]


def _load_entry_points() -> None:
    if _loaded[0]:
        return
    _loaded[0] = True
    entries = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    # the built-ins first, whatever the order of the path: the order of status and reports
    entries.sort(key=lambda entry: _distribution(entry) != OWN_DISTRIBUTION)
    for entry in entries:
        origin: Origin = "built-in" if _distribution(entry) == OWN_DISTRIBUTION else "plugin"
        try:
            loaded = entry.load()
        except Exception as error:
            raise MetricError(f"metric plugin {entry.name} ({entry.value}) could not be loaded: {error}") from error
        for spec in loaded if isinstance(loaded, Sequence) else (loaded,):
            if not isinstance(spec, MetricSpec):
                raise MetricError(f"metric plugin {entry.value} gave {spec!r}, not a MetricSpec")
            if spec.name in _REGISTERED and _REGISTERED[spec.name] is not spec:
                raise MetricError(f"metric {spec.name!r} is given by two plugins ({entry.value} and another)")
            register(spec, origin=origin)


def _distribution(entry: importlib.metadata.EntryPoint) -> str | None:
    return entry.dist.metadata["Name"] if entry.dist is not None else None


def registered() -> dict[str, MetricSpec]:
    """Every registered metric by name, in registration order."""
    _load_entry_points()
    if not _REGISTERED:
        raise ConfigError(f"no metric is registered: is judgeflow installed (its {ENTRY_POINT_GROUP!r} "
                          "entry points)? Run ./scripts/setup or pip install -e .")
    return dict(_REGISTERED)


def metric_names() -> tuple[str, ...]:
    return tuple(registered())


def session_rate_of(spec: MetricSpec) -> MetricSpec:
    """Trace metric ``spec``'s session rate (``<name>_session``), the same object each time for the same
    spec. Judged by nobody: its results are computed from the session's turns' results of ``spec``
    (:mod:`judgeflow.metrics.session_rate`), at no judge cost. Its settings: ``threshold`` 0 (a session
    passes while none of its turns failed), ``rate_max`` defaulting to a built-in trace metric's own default
    (a plugin's or a file's: off), no regression rule by default."""
    made = _RATES.get(id(spec))
    if made is None or made[0] is not spec:
        made = (spec, _session_rate_spec(spec))
        _RATES[id(spec)] = made
    return made[1]


def _session_rate_spec(spec: MetricSpec) -> MetricSpec:
    name = rate_name(spec.name)
    # on by default only where judgeflow's own metric pages per trace by default (toxicity's): a plugin's or a
    # metrics file's rate is the user's to turn on, as the issue asks (its rule "off by default")
    own = _REGISTERED.get(spec.name) is spec and _ORIGINS.get(spec.name) == "built-in"
    rate_max = spec.settings.model_fields["rate_max"].default if own else None
    settings = create_model(
        f"{''.join(part.title() for part in name.split('_'))}Settings", __base__=MetricSettings,
        threshold=(float, Field(0.0, ge=0, le=1, description="a session whose share of failed turns is above "
                                "it does not pass (0: any failed turn fails the session)")),
        rate_max=(float | None, Field(rate_max, ge=0, le=1, description=f"the {name}_rate alert rule's maximum "
                                      "share of sessions not passed; unset: off")),
    )

    def never_built(judge: Judge, settings: Any, options: BuildOptions) -> ScoringMetric:
        raise MetricError(f"{name} is computed from {spec.name}'s turn results; it is never judged")

    return MetricSpec(
        name=name, steps={}, version_of=lambda: SESSION_RATE_VERSION, fields=("output",),
        cost=CostEstimate(0, {}, 0), build=never_built, settings=settings,
        description=f"share of a session's turns that failed {spec.name} (no judge calls)",
        segment_by=spec.segment_by, level="session", rate_of=spec.name,
    )


def with_rates(specs: Mapping[str, MetricSpec]) -> dict[str, MetricSpec]:
    """``specs`` with each trace metric's session rate right after it."""
    out: dict[str, MetricSpec] = {}
    for name, spec in specs.items():
        out[name] = spec
        if spec.level == "trace" and spec.rate_of is None:
            rate = session_rate_of(spec)
            out[rate.name] = rate
    return out


def reported() -> dict[str, MetricSpec]:
    """Every metric whose results are read (rules, status, reports, trend): the registered ones, each trace
    metric followed by its session rate."""
    return with_rates(registered())


def reported_names() -> tuple[str, ...]:
    return tuple(reported())


def unit_of(name: str) -> str:
    """What one result of metric ``name`` counts: "sessions" or "traces" (a metric no longer served: traces,
    unless its name is a session rate's)."""
    spec = reported().get(name)
    if spec is not None:
        return spec.unit
    return "sessions" if name.endswith(SESSION_RATE_SUFFIX) else "traces"


def spec_of(name: str) -> MetricSpec:
    """The metric called ``name``; an unknown one is a ConfigError naming the registered ones."""
    specs = registered()
    if name not in specs:
        raise MetricError(f"unknown metric {name!r}; choose from {', '.join(specs)}")
    return specs[name]


def check_names(names: Sequence[str]) -> list[str]:
    """``names`` if every one is registered; else one ConfigError naming them all."""
    specs = registered()
    unknown = [name for name in names if name not in specs]
    if unknown:
        raise MetricError(f"unknown metric{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                          f"choose from {', '.join(specs)}")
    return list(names)


def current_versions() -> dict[str, str]:
    """Each registered metric's version as the code is now."""
    return {name: spec.version for name, spec in registered().items()}


def at_level(names: Sequence[str], level: Level) -> list[str]:
    """Those of ``names`` judged at ``level``: a run pairs trace metrics with traces, session
    metrics with sessions, never one with the other. A session rate (``rate_of``) is judged at
    neither: it is computed from its turns' results (tasks/session_rates.py)."""
    specs = registered()
    return [name for name in names if specs[name].level == level and specs[name].rate_of is None]


def trace_metric_names() -> list[str]:
    """The registered metrics judged per trace: what the source's pending pairs and watermarks are of."""
    return at_level(metric_names(), "trace")


def chosen(names: Sequence[str] | None) -> list[str]:
    """The metrics a run or command was given (checked), or every registered one for None."""
    return list(metric_names()) if names is None else check_names(list(names))
