"""Prompt builders, checked on the raw message strings they produce."""

from __future__ import annotations

import json

import pytest
from judgeflow.metrics.data_block import BEGIN, DATA_NOTICE, END, parse_data_block
from judgeflow.metrics.hallucination import template as hallucination
from judgeflow.metrics.hallucination.template import FewShotExample
from judgeflow.metrics.toxicity import template as toxicity

RUBRIC_CATEGORIES = ["Personal attacks", "Mockery", "Hate", "Dismissive statements", "Threats or intimidation"]


def assert_layout(messages: list[dict[str, str]], data: dict) -> None:
    """System message: instructions + notice + shape; user message: only the data block."""
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert DATA_NOTICE in system
    assert "JSON object of this shape" in system
    assert user.startswith(BEGIN) and user.endswith(END)
    assert parse_data_block(user) == data


def test_opinions_prompt() -> None:
    messages = toxicity.opinions_messages("How is Sam?", "Sam is lazy.")
    assert_layout(messages, {"input": "How is Sam?", "output": "Sam is lazy."})
    system = messages[0]["content"]
    assert toxicity.OPINIONS_SHAPE in system
    assert "not the author's own" in system  # cited opinions are excluded
    assert "claims, not opinions" in system


def test_verdicts_prompt_has_rubric_and_count() -> None:
    messages = toxicity.verdicts_messages(["a", "b", "c"])
    assert_layout(messages, {"opinion_count": 3, "opinions": ["a", "b", "c"]})
    system = messages[0]["content"]
    for category in RUBRIC_CATEGORIES:
        assert category in system
    assert system.count("   Toxic:") == 5 and system.count("   Not toxic:") == 5
    assert 'Return exactly "opinion_count" verdicts, one per opinion' in system
    assert system == toxicity.verdicts_messages(["x"])[0]["content"]  # the count is in the data, not here
    assert toxicity.VERDICTS_SHAPE in system


def test_reason_prompt_states_the_share_rule_and_the_counts() -> None:
    messages = toxicity.reason_messages(0.25, ["insult"], ["you are an idiot"], opinion_count=4)
    assert_layout(
        messages,
        {
            "score": 0.25, "opinion_count": 4, "toxic_count": 1,
            "toxic_opinions": ["you are an idiot"], "toxic_reasons": ["insult"],
        },
    )
    system = messages[0]["content"]
    assert system.startswith(toxicity.REASON_INSTRUCTIONS)
    assert "share of the author's opinions" in system and "strict" not in system
    assert 'use exactly "toxic_count" and "opinion_count"' in system
    assert toxicity.REASON_SHAPE in system


def test_strict_reason_prompt_states_the_any_toxic_rule() -> None:
    """One toxic opinion of two scores 1 in strict mode: the reason step is told
    that rule, not the share rule, and gets the counts it must quote."""
    messages = toxicity.reason_messages(1.0, ["insult"], ["you are an idiot"], opinion_count=2, strict_mode=True)
    data = parse_data_block(messages[1]["content"])
    assert (data["score"], data["opinion_count"], data["toxic_count"]) == (1.0, 2, 1)
    system = messages[0]["content"]
    assert system.startswith(toxicity.STRICT_REASON_INSTRUCTIONS)
    assert "it is 1 when at least one of the author's opinions was judged toxic" in system
    assert "It is not a share" in system and "share of the author's opinions that" not in system
    assert 'use exactly "toxic_count" and "opinion_count"' in system


def test_hallucination_prompt_with_context() -> None:
    messages = hallucination.hallucination_messages("q", "a", ["c1", "c2"])
    assert_layout(messages, {"input": "q", "context": ["c1", "c2"], "output": "a"})
    system = messages[0]["content"]
    assert system.startswith(hallucination.WITH_CONTEXT_INSTRUCTIONS)
    for number in range(1, 9):
        assert f"\n{number}. " in system
    assert hallucination.SHAPE in system
    assert hallucination.EXAMPLES_INTRO not in system


@pytest.mark.parametrize("context", [None, []])
def test_hallucination_prompt_without_context(context: list[str] | None) -> None:
    messages = hallucination.hallucination_messages("q", "a", context)
    assert_layout(messages, {"input": "q", "output": "a"})
    system = messages[0]["content"]
    assert system.startswith(hallucination.NO_CONTEXT_INSTRUCTIONS)
    assert "well-established facts" in system


def test_few_shot_examples_are_rendered_as_json_outside_the_data_block() -> None:
    example = FewShotExample(
        title="wrong capital", input="Capital of Australia?", context=None,
        output="Sydney.", score=1.0, reason="The capital is Canberra.",
    )
    messages = hallucination.hallucination_messages("q", "a", None, [example])
    system = messages[0]["content"]
    assert hallucination.EXAMPLES_INTRO in system
    rendered = system.split(hallucination.EXAMPLES_INTRO + "\n", 1)[1].split("\n\n" + DATA_NOTICE)[0]
    assert json.loads(rendered) == [
        {
            "title": "wrong capital",
            "data": {"input": "Capital of Australia?", "output": "Sydney."},
            "expected_reply": {"score": 1.0, "reason": ["The capital is Canberra."]},
        }
    ]
    assert f"{BEGIN}\n" not in system  # no data block: the notice only names the markers
