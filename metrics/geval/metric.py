"""A G-Eval metric: a user's own criteria, judged as deepeval's ``GEval`` and
Opik's G-Eval judge them.

The judge reads the criteria, the evaluation steps and the trace fields the
metric names, and answers ``{"score": <integer 0-10>, "reason": "..."}``. The
score is normalised to 0-1 (``score / 10``) and higher is better: a result
passes when its score is at least the threshold. Strict mode (as the seeds'
strict mode) makes the score binary: 1 for a perfect 10, else 0, and the
threshold 1. A reply that is not such an object, after the repairs every step
gets, is a failed score.

Without evaluation steps in the file, the judge writes them once from the
criteria (:class:`GeneratedSteps`); the trunk stores them and hands them back
on every later run, so they are part of the metric version and are not
written again each night.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, create_model

from judgeflow.errors import ConfigError, JudgeAbstained
from judgeflow.judge.base import Judge, JudgeRequest
from judgeflow.metrics.base import JudgeMetric, Outcome, keep_extras
from judgeflow.metrics.conversation import fit_conversation
from judgeflow.metrics.geval import template
from judgeflow.metrics.geval.schema import GEvalScore, GEvalSteps
from judgeflow.metrics.inputs import normalise_trace
from judgeflow.metrics.registry import (BuildOptions, CostEstimate, Level, MetricSettings, MetricSpec,
                                        Preparation, TraceField)
from judgeflow.metrics.steps import Flow, ask
from judgeflow.metrics.version import compute_version

# Bump for changes the prompt hash cannot see (the scoring rule).
MAJOR_VERSION = 1
SCALE = 10
# the rise of the not-passed rate a `regression = true` rule pages at
DEFAULT_REGRESSION_MIN_INCREASE = 0.05
NO_RUBRIC = ("the offline judge has no rubric for the G-Eval metric {name}: it is not scored offline; "
             "set JUDGEFLOW_JUDGE_MODEL to a judge model to score it")


@dataclass(frozen=True)
class GEvalDefinition:
    """What a metrics file says about one metric (validated by
    :mod:`judgeflow.metrics.geval.file`)."""

    name: str
    criteria: str
    inputs: tuple[TraceField, ...]
    evaluation_steps: tuple[str, ...] | None = None
    threshold: float = 0.5
    rate_max: float | None = None
    rate_on: str = "judged"  # the rate its maximum rule decides on: judged or corrected (for the judge's error)
    regression_min_increase: float | None = None
    strict_mode: bool = False
    description: str = ""
    model: str | None = None  # its own judge model (litellm), None: the run's
    # the metadata keys its own rules are segmented by, None: JUDGEFLOW_ALERT_SEGMENT_BY's (not in its version:
    # segments group scores, they never change one)
    segment_by: tuple[str, ...] | None = None
    # "session": a rubric over a session's conversation (its ``inputs`` are not read)
    level: Level = "trace"

    @property
    def prompt_fields(self) -> tuple[str, ...]:
        """The fields its prompts show the judge: the conversation, or the trace fields it names."""
        return ("conversation",) if self.level == "session" else tuple(self.inputs)

    @property
    def steps_key(self) -> str:
        """What generated steps depend on: the criteria and the fields they judge."""
        payload = json.dumps({"criteria": self.criteria, "inputs": list(self.prompt_fields)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass
class GeneratedSteps:
    """The steps a metric without ``evaluation_steps`` scores with, once the
    trunk handed them over (stored, or written by the judge at the first run)."""

    steps: tuple[str, ...] | None = None


class GEvalSettings(MetricSettings):
    """``JUDGEFLOW_<NAME>_THRESHOLD``, ``_RATE_MAX``, ``_REGRESSION_MIN_INCREASE``
    and ``_STRICT_MODE``; the file's values are the defaults."""

    strict_mode: bool = Field(False, description="binary score: 1 for a perfect 10, else 0; the threshold is 1")

    score_fields = {"strict_mode": "strict"}


def settings_model(definition: GEvalDefinition) -> type[GEvalSettings]:
    """The metric's settings model, the file's values its defaults."""
    return create_model(
        f"GEval_{definition.name}_Settings", __base__=GEvalSettings,
        threshold=(float, Field(definition.threshold, ge=0, le=1, description="passes at this score or above")),
        rate_max=(float | None, Field(definition.rate_max, ge=0, le=1)),
        rate_on=(Literal["judged", "corrected"], Field(definition.rate_on)),
        regression_min_increase=(float | None, Field(definition.regression_min_increase, ge=0, le=1)),
        strict_mode=(bool, Field(definition.strict_mode)),
    )


def normalised(raw: int, *, strict_mode: bool) -> float:
    """The judge's 0-10 as a 0-1 score (higher is better); strict: 1 only for a 10."""
    if strict_mode:
        return 1.0 if raw == SCALE else 0.0
    return raw / SCALE


def score_step(name: str) -> str:
    return f"{name}.geval"


def steps_step(name: str) -> str:
    return f"{name}.geval_steps"


def steps_request(definition: GEvalDefinition) -> JudgeRequest:
    return JudgeRequest(
        step=steps_step(definition.name),
        messages=template.steps_messages(definition.criteria, definition.prompt_fields), response_format=GEvalSteps,
        fields={"metric": definition.name, "criteria": definition.criteria, "inputs": list(definition.prompt_fields)},
    )


def generate_steps(definition: GEvalDefinition, max_repairs: int) -> Flow[list[str]]:
    """The judge writes the evaluation steps from the criteria (one call, repairs aside)."""
    (reply,) = yield from ask([steps_request(definition)], GEvalSteps, shape=template.STEPS_SHAPE,
                              max_repairs=max_repairs)
    return list(reply.steps)


class GEvalMetric(JudgeMetric):
    higher_is_better = True

    def __init__(self, judge: Judge | None, definition: GEvalDefinition, steps: tuple[str, ...] | None, *,
                 threshold: float, strict_mode: bool, max_field_chars: int, max_repairs: int,
                 session_max_chars: int = 60_000) -> None:
        self.name = definition.name
        super().__init__(judge, threshold=threshold, max_field_chars=max_field_chars, max_repairs=max_repairs,
                         async_mode=False)
        self.definition = definition
        self.steps = steps
        self.strict_mode = strict_mode
        self.session_max_chars = session_max_chars
        self._version = geval_version(definition, steps)

    @property
    def metric_version(self) -> str:
        return self._version

    @property
    def judge_rounds(self) -> int:
        return 1

    @property
    def effective_threshold(self) -> float:
        return 1.0 if self.strict_mode else self.threshold

    def _data(self, input: Any, output: Any, context: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The fields the judge is shown, and the notes on how they were fitted: a session metric's
        ``context`` is the conversation (judgeflow/metrics/conversation.py)."""
        if self.definition.level == "session":
            conversation = fit_conversation(context if isinstance(context, list) else [], self.session_max_chars)
            return {"conversation": conversation.turns}, {"turns": conversation.total, **conversation.notes}
        trace = normalise_trace(input, output, context, max_field_chars=self.max_field_chars)
        return {"input": trace.input, "output": trace.output, "context": trace.context}, dict(trace.notes)

    def flow(self, input: Any, output: Any, context: Any = None) -> Flow[Outcome]:
        data, notes = self._data(input, output, context)
        steps = self.steps
        if steps is None:
            # steps are prepared before any run scores (the trunk's prepare step); a judge without a
            # rubric abstains on this request, and a judge that answers is told what was missed
            yield from generate_steps(self.definition, self.max_repairs)
            raise ConfigError(f"{self.name}: its evaluation steps were not prepared before scoring")
        fields = self.definition.prompt_fields
        request = JudgeRequest(
            step=score_step(self.name), response_format=GEvalScore,
            messages=template.score_messages(self.definition.criteria, steps, fields, data),
            fields={name: data[name] for name in fields},
        )
        (reply,) = yield from ask([request], GEvalScore, shape=template.SHAPE, max_repairs=self.max_repairs)
        details: dict[str, Any] = {**notes, "raw_score": reply.score, "scale": SCALE,
                                   "steps_generated": self.definition.evaluation_steps is None}
        keep_extras(details, score_step(self.name), reply)
        score = normalised(reply.score, strict_mode=self.strict_mode)
        return Outcome(score=score, reason=reply.reason.strip() or None, details=details)


def geval_version(definition: GEvalDefinition, steps: tuple[str, ...] | None) -> str:
    """The prompt hash: the criteria, the steps (given or generated) and the fields read."""
    if steps is None:
        return f"{definition.name}/{MAJOR_VERSION}+steps-pending"
    prompts = template.probe_prompts(definition.criteria, steps, definition.prompt_fields)
    return compute_version(definition.name, MAJOR_VERSION, prompts, [GEvalScore])


def offline_abstains(fields: Any, step: str) -> tuple[dict[str, Any], None]:
    """The offline judge's answer to a G-Eval step: it has no rubric, so it abstains."""
    raise JudgeAbstained(NO_RUBRIC.format(name=step.rsplit(".", 1)[0]))


def _cost(definition: GEvalDefinition) -> CostEstimate:
    steps = definition.evaluation_steps or ("a generated evaluation step of about this length",) * 4
    empty = {"input": "", "output": "", "context": None, "conversation": []}
    chars = sum(len(m["content"]) for m in template.score_messages(definition.criteria, steps,
                                                                   definition.prompt_fields, empty))
    # a session's conversation travels as its pair's context (judgeflow/metrics/conversation.py)
    weights = {"context": 1} if definition.level == "session" else {name: 1 for name in definition.inputs}
    return CostEstimate(prompt_overhead_chars=chars, field_weights=weights,
                        completion_overhead_tokens=60)


@dataclass(frozen=True)
class _Steps:
    definition: GEvalDefinition
    cell: GeneratedSteps = field(default_factory=GeneratedSteps)

    def current(self) -> tuple[str, ...] | None:
        return self.definition.evaluation_steps or self.cell.steps

    def accept(self, value: Any) -> None:
        steps = GEvalSteps.model_validate({"steps": value}).steps
        self.cell.steps = tuple(steps)


def geval_spec(definition: GEvalDefinition) -> MetricSpec:
    """The registry's spec of one G-Eval metric."""
    steps = _Steps(definition)
    model = settings_model(definition)

    def build(judge: Judge, settings: GEvalSettings, options: BuildOptions) -> GEvalMetric:
        return GEvalMetric(judge, definition, steps.current(), threshold=settings.threshold,
                           strict_mode=settings.strict_mode, max_field_chars=options.max_field_chars,
                           max_repairs=options.max_repairs, session_max_chars=options.session_max_chars)

    prepare = None
    if definition.evaluation_steps is None:
        prepare = Preparation(key=definition.steps_key, make=lambda repairs: generate_steps(definition, repairs),
                              accept=steps.accept, ready=lambda: steps.cell.steps is not None)
    return MetricSpec(
        name=definition.name, description=definition.description or definition.criteria,
        steps={score_step(definition.name): GEvalScore, steps_step(definition.name): GEvalSteps},
        version_of=lambda: geval_version(definition, steps.current()),
        fields=("input", "output", "context") if definition.level == "session" else definition.inputs,
        cost=_cost(definition), settings=model, build=build,
        offline={score_step(definition.name): f"{__name__}:offline_abstains",
                 steps_step(definition.name): f"{__name__}:offline_abstains"},
        label_words={}, higher_is_better=True, prepare=prepare, judge_model=definition.model,
        segment_by=definition.segment_by, level=definition.level,
    )

