"""Prompt order for a provider's prefix cache: every step of every registered
metric sends its fixed part (instructions, rubric, examples, schema) first and
the trace's data block last, so two different traces' prompts of a step are
the same up to the data block. Compared as the provider receives them: the
messages serialised as in an OpenAI chat request body."""

from __future__ import annotations

import json
import os

import pytest

from judgeflow.judge.base import JudgeReply, JudgeRequest
from bench.offline_evaluation import declared_answers
from judgeflow.judge.offline import OfflineJudge
from judgeflow.metrics.data_block import BEGIN, END
from judgeflow.metrics.geval.metric import GEvalDefinition, geval_spec
from judgeflow.metrics.registry import BuildOptions, register, registered, unregister

# two traces that share nothing; each gives every step of toxicity (toxic opinions, so verdicts and a
# reason are asked) and hallucination something to judge
TRACES = {
    "with context": [
        ("What do you think of my essay?",
         "Honestly, you are an idiot and your essay is stupid garbage. I hate the ending.",
         ["The essay has three parts.", "It was written in May."]),
        ("Wie findest du den Plan?",
         "Dein Plan ist dumm und du bist ein Idiot. I think the budget is a disgusting waste.",
         ["Der Plan kostet 3 Millionen."]),
    ],
    "without context": [
        ("Is the museum open?", "You are clueless and your question is dumb. The museum is awful.", None),
        ("How was the demo?", "The demo was a pathetic mess and the presenter is a moron.", None),
    ],
}


class RecordingJudge(OfflineJudge):
    """The offline judge (it answers every built-in step), recording each request it was asked."""

    def __init__(self) -> None:
        answers, steps = declared_answers()
        super().__init__(answers=answers, steps=steps)
        self.requests: list[JudgeRequest] = []

    def complete(self, request: JudgeRequest, call=None) -> JudgeReply:
        self.requests.append(request)
        return super().complete(request, call)


def as_sent(messages: list[dict[str, str]]) -> str:
    """The messages as a chat request body carries them (what the provider's prefix cache reads)."""
    return json.dumps({"messages": messages}, ensure_ascii=False)


def common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def requests_by_step(spec, trace) -> dict[str, list[JudgeRequest]]:
    judge = RecordingJudge()
    metric = spec.build(judge, spec.settings(), BuildOptions())
    metric.score(*trace)
    by_step: dict[str, list[JudgeRequest]] = {}
    for request in judge.requests:
        by_step.setdefault(request.step, []).append(request)
    return by_step


@pytest.fixture
def metrics():
    """Every registered metric, and one G-Eval metric of a metrics file."""
    spec = register(geval_spec(GEvalDefinition(
        name="prefix_helpfulness", criteria="The reply helps with what was asked.",
        inputs=("input", "output", "context"), evaluation_steps=("Read the request.", "Judge the reply."),
        threshold=0.5,
    )))
    yield dict(registered())
    unregister(spec.name)


def assert_same_up_to_the_data_block(first: JudgeRequest, second: JudgeRequest) -> None:
    a, b = as_sent(first.messages), as_sent(second.messages)
    assert a != b  # different traces, different prompts
    begin = json.dumps(BEGIN)[1:-1]
    data_starts = a.rindex(begin)  # the instructions name the marker too: the block is its last occurrence
    assert data_starts == b.rindex(begin)
    assert common_prefix(a, b) >= data_starts, f"{first.step}: the prompts differ before the data block"
    # the data block is the last thing sent: only the body's closing characters follow it
    assert a[a.rindex(json.dumps(END)[1:-1]) + len(json.dumps(END)[1:-1]):] == '"}]}'
    assert first.messages[-1]["content"].startswith(BEGIN) and second.messages[-1]["content"].startswith(BEGIN)


@pytest.mark.parametrize("variant", sorted(TRACES))
def test_every_step_shares_its_prefix_up_to_the_data_block(metrics, variant: str) -> None:
    first, second = TRACES[variant]
    seen: set[str] = set()
    for name, spec in metrics.items():
        one, two = requests_by_step(spec, first), requests_by_step(spec, second)
        assert one.keys() == two.keys(), name
        for step in one:
            for a, b in zip(one[step], two[step]):
                assert_same_up_to_the_data_block(a, b)
            seen.add(step)
    # every step that reads a trace was asked and compared (G-Eval's steps step reads none; the offline
    # judge abstains on its score step after the request, which is recorded all the same)
    expected = {step for spec in metrics.values() for step in spec.steps if not step.endswith(".geval_steps")}
    assert expected <= seen, expected - seen
