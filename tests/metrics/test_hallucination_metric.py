"""HallucinationMetric: variants, scoring, inputs, examples and accounting."""

from __future__ import annotations

import pytest
from judgeflow.metrics import FewShotExample, HallucinationMetric
from judgeflow.metrics.hallucination import template
from judgeflow.metrics.hallucination.metric import hallucination_version
from judgeflow.metrics.hallucination.schema import HallucinationJudgement

from judgeflow.errors import ConfigError, InvalidJudgeReplyError, InvalidTraceError, JudgeAbstained
from judgeflow.judge.base import JudgeRequest
from tests.metrics.fakes import ScriptedJudge, hallucination_reply

EXAMPLE = FewShotExample(
    title="invented date",
    input="When did the bridge open?",
    context=["The bridge opened in 1932."],
    output="It opened in 1945.",
    score=1.0,
    reason="The context says 1932.",
)


def judge_scoring(score: float, *reasons: str, **kwargs) -> ScriptedJudge:
    return ScriptedJudge({"hallucination": hallucination_reply(score, *reasons)}, **kwargs)


def test_with_context() -> None:
    judge = judge_scoring(0.0, "Every claim is in the context.")
    result = HallucinationMetric(judge).score(
        "What is the capital of France?", "Paris.", ["France's capital is Paris."]
    )
    assert (result.name, result.status, result.score, result.passed) == ("hallucination", "scored", 0.0, True)
    assert result.reason == "Every claim is in the context."
    assert result.details["reasons"] == ["Every claim is in the context."]
    assert result.details["context_used"] is True
    (request,) = judge.requests
    assert request.step == "hallucination" and request.response_format is HallucinationJudgement
    assert dict(request.fields) == {
        "input": "What is the capital of France?",
        "output": "Paris.",
        "context": ["France's capital is Paris."],
        "examples": [],
    }
    assert request.messages[0]["content"].startswith(template.WITH_CONTEXT_INSTRUCTIONS)


@pytest.mark.parametrize("context", [None, [], [None], [""], "  ", [" ", ""], ["\n\t", None]])
def test_without_context_uses_the_general_knowledge_variant(context: object) -> None:
    judge = judge_scoring(1.0, "Lyon is not the capital.")
    result = HallucinationMetric(judge).score("Capital of France?", "Lyon.", context)
    assert result.score == 1.0 and result.passed is False
    assert result.details["context_used"] is False
    (request,) = judge.requests
    assert request.fields["context"] is None
    assert request.messages[0]["content"].startswith(template.NO_CONTEXT_INSTRUCTIONS)


def test_reasons_are_joined() -> None:
    result = HallucinationMetric(judge_scoring(0.6, "First issue.", " ", "Second issue.")).score("q", "a", ["c"])
    assert result.reason == "First issue. Second issue."
    assert result.details["reasons"] == ["First issue.", "Second issue."]


def test_no_reasons_gives_no_reason() -> None:
    assert HallucinationMetric(judge_scoring(0.0)).score("q", "a", ["c"]).reason is None


@pytest.mark.parametrize(("threshold", "passed"), [(0.5, True), (0.49, False), (0.51, True)])
def test_threshold_is_a_maximum_and_inclusive(threshold: float, passed: bool) -> None:
    result = HallucinationMetric(judge_scoring(0.5, "r"), threshold=threshold).score("q", "a")
    assert result.passed is passed and result.threshold == threshold


def test_out_of_range_score_is_repaired() -> None:
    judge = ScriptedJudge({"hallucination": [hallucination_reply(7, "r"), hallucination_reply(0.7, "r")]})
    result = HallucinationMetric(judge).score("q", "a")
    assert result.score == 0.7 and result.judge_calls == 2
    assert "score" in judge.requests[1].messages[-1]["content"]
    assert template.SHAPE in judge.requests[1].messages[-1]["content"]


def test_persistently_invalid_reply_raises() -> None:
    judge = ScriptedJudge({"hallucination": '{"score": "high"}'})
    with pytest.raises(InvalidJudgeReplyError) as caught:
        HallucinationMetric(judge, max_repairs=2).score("q", "a")
    assert (caught.value.step, caught.value.raw, caught.value.attempts) == ("hallucination", '{"score": "high"}', 3)
    assert len(judge.requests) == 3


def test_few_shot_examples_reach_prompt_and_fields() -> None:
    judge = judge_scoring(0.0, "fine")
    metric = HallucinationMetric(judge, few_shot_examples=[EXAMPLE])
    metric.score("q", "a", ["c"])
    (request,) = judge.requests
    assert request.fields["examples"] == [EXAMPLE.model_dump()]
    assert "It opened in 1945." in request.messages[0]["content"]
    assert "It opened in 1945." not in request.messages[1]["content"]


def test_few_shot_examples_may_be_given_as_dicts() -> None:
    metric = HallucinationMetric(judge_scoring(0.0), few_shot_examples=[EXAMPLE.model_dump()])  # type: ignore[list-item]
    assert metric.few_shot_examples == [EXAMPLE]


def test_invalid_few_shot_example_is_rejected() -> None:
    with pytest.raises(ValueError):
        HallucinationMetric(judge_scoring(0.0), few_shot_examples=[{**EXAMPLE.model_dump(), "score": 2}])  # type: ignore[list-item]


@pytest.mark.parametrize("output", ["", "   "])
def test_empty_output_scores_zero_without_calls(output: str) -> None:
    judge = judge_scoring(1.0)
    result = HallucinationMetric(judge).score("q", output, ["c"])
    assert judge.requests == []
    assert (result.score, result.passed, result.reason) == (0.0, True, "output is empty: nothing to check")
    assert result.judge_calls == 0


def test_null_output_raises() -> None:
    with pytest.raises(InvalidTraceError, match="output is null"):
        HallucinationMetric(judge_scoring(0.0)).score("q", None)


def test_bad_context_raises() -> None:
    with pytest.raises(InvalidTraceError, match="context must be"):
        HallucinationMetric(judge_scoring(0.0)).score("q", "a", {"doc": "x"})


def test_string_context_is_wrapped_and_coercion_reported() -> None:
    judge = judge_scoring(0.0)
    HallucinationMetric(judge).score("q", "a", "single passage")
    assert judge.requests[0].fields["context"] == ["single passage"]

    judge = judge_scoring(0.0)
    result = HallucinationMetric(judge).score("q", "a", ["x", 1, None])
    assert judge.requests[0].fields["context"] == ["x", "1"]
    assert result.details["context_coerced"] == 2


def test_truncation_is_reported() -> None:
    judge = judge_scoring(0.0)
    result = HallucinationMetric(judge, max_field_chars=5).score("question", "answer!", ["abc", "defg"])
    assert dict(judge.requests[0].fields) | {"examples": []} == {
        "input": "quest", "output": "answe", "context": ["abc", "de"], "examples": [],
    }
    assert result.details["truncated"] == {"input": 8, "output": 7, "context": 7}


def test_abstaining_judge_gives_a_skipped_result() -> None:
    def script(request: JudgeRequest) -> str:
        raise JudgeAbstained("no context to check against")

    result = HallucinationMetric(ScriptedJudge(script)).score("q", "a")
    assert (result.status, result.score, result.passed) == ("skipped", None, None)
    assert result.reason == "no context to check against"


async def test_ascore() -> None:
    judge = judge_scoring(0.3, "minor slip", cost_usd=0.002)
    result = await HallucinationMetric(judge).ascore("q", "a", ["c"])
    assert (result.score, result.judge_calls, result.cost_usd) == (0.3, 1, 0.002)
    assert result.metric_version == hallucination_version()


def test_bad_threshold_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        HallucinationMetric(judge_scoring(0.0), threshold=2)
