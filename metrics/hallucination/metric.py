"""The hallucination metric: one judge call deciding whether the output holds a
hallucination, against the context when there is one, otherwise against
well-established facts.

The judge is asked for 0 (no hallucination) or 1 (a hallucination, partial
ones included), as the seed's scale is; the score is the value it gave, kept
as it is (a score outside [0, 1] is an invalid reply). The threshold is a
maximum: ``passed = score <= threshold``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from judgeflow.metrics.base import JudgeMetric, Outcome, keep_extras
from judgeflow.metrics.hallucination import template
from judgeflow.metrics.hallucination.schema import HallucinationJudgement
from judgeflow.metrics.hallucination.template import FewShotExample
from judgeflow.metrics.inputs import DEFAULT_MAX_FIELD_CHARS, normalise_trace
from judgeflow.metrics.steps import Flow, ask
from judgeflow.metrics.version import compute_version

from judgeflow.judge.base import Judge, JudgeRequest
from judgeflow.metrics.registry import BuildOptions, CostEstimate, MetricSettings, MetricSpec

STEP = "hallucination"

# Bump for changes the prompt hash cannot see (the scoring rule, input rules).
# 2: blank context items are dropped, so blank context selects the no-context
# prompt (issue 17).
# 3: the judge is asked for 0 or 1, not a graded score; replies are read
# tolerantly (issue 32).
MAJOR_VERSION = 3

EMPTY_OUTPUT_REASON = "output is empty: nothing to check"


def hallucination_version(examples: Sequence[FewShotExample] = ()) -> str:
    """The version of the current prompts and schema, e.g. ``hallucination/2+0c4d2e7b``.

    Few-shot examples change what the judge is shown, so a metric configured
    with examples gets a different hash; without examples it is this default.
    """
    prompts: list[Any] = list(template.probe_prompts())
    if examples:
        prompts.append([example.model_dump() for example in examples])
    return compute_version("hallucination", MAJOR_VERSION, prompts, [HallucinationJudgement])


class HallucinationMetric(JudgeMetric):
    name = "hallucination"

    def __init__(
        self,
        judge: Judge | None,
        threshold: float = 0.5,
        few_shot_examples: list[FewShotExample] | None = None,
        max_field_chars: int = DEFAULT_MAX_FIELD_CHARS,
        max_repairs: int = 2,
    ) -> None:
        # One request per run, so there is nothing to run concurrently.
        super().__init__(
            judge,
            threshold=threshold,
            max_field_chars=max_field_chars,
            max_repairs=max_repairs,
            async_mode=False,
        )
        # Validate dicts too, so configuration from YAML/JSON fails here, not mid-run.
        self.few_shot_examples = [FewShotExample.model_validate(e) for e in few_shot_examples or []]
        self._version = hallucination_version(self.few_shot_examples)

    @property
    def metric_version(self) -> str:
        return self._version

    @property
    def judge_rounds(self) -> int:
        return 1

    def flow(self, input: Any, output: Any, context: Any = None) -> Flow[Outcome]:
        """The metric's logic, free of I/O; ``ascore`` drives it."""
        trace = normalise_trace(input, output, context, max_field_chars=self.max_field_chars)
        details: dict[str, Any] = {**trace.notes, "context_used": trace.context is not None}
        if trace.output_is_empty:
            return Outcome(score=0.0, reason=EMPTY_OUTPUT_REASON, details={**details, "reasons": []})

        request = JudgeRequest(
            step=STEP,
            messages=template.hallucination_messages(
                trace.input, trace.output, trace.context, self.few_shot_examples
            ),
            response_format=HallucinationJudgement,
            fields={
                "input": trace.input,
                "output": trace.output,
                "context": trace.context,
                "examples": [e.model_dump(mode="json") for e in self.few_shot_examples],
            },
        )
        (judgement,) = yield from ask(
            [request], HallucinationJudgement, shape=template.SHAPE, max_repairs=self.max_repairs
        )
        keep_extras(details, STEP, judgement)
        reasons = [reason.strip() for reason in judgement.reason if reason.strip()]
        details["reasons"] = reasons
        return Outcome(score=judgement.score, reason=" ".join(reasons) or None, details=details)


class HallucinationSettings(MetricSettings):
    """``JUDGEFLOW_HALLUCINATION_THRESHOLD``, ``_RATE_MAX`` (unset: off) and
    ``_REGRESSION_MIN_INCREASE``."""

    # the content hash of every stored hallucination result was made with these keys
    hash_constants = {"strict": None, "max_opinions": None}


def _build(judge: Judge, settings: HallucinationSettings, options: BuildOptions) -> HallucinationMetric:
    return HallucinationMetric(judge, threshold=settings.threshold, max_field_chars=options.max_field_chars,
                               max_repairs=options.max_repairs)


SPEC = MetricSpec(
    name=HallucinationMetric.name,
    description="whether the output holds a hallucination, against its context when there is one",
    steps={STEP: HallucinationJudgement},
    version_of=hallucination_version,
    fields=("input", "output", "context"),
    # measured by rendering the prompt: one call (~2,050 chars + input + output + context); the reply is
    # a score and a few reasons
    cost=CostEstimate(prompt_overhead_chars=2_050, field_weights={"input": 1, "output": 1, "context": 1},
                      completion_overhead_tokens=60, completion_output_share=0.0),
    settings=HallucinationSettings,
    build=_build,
    label_words={"unfaithful": True, "hallucinated": True, "faithful": False},
    offline={STEP: "judgeflow.judge.offline.answers:hallucination"},
)
