"""Replies in the forms real models write them, through the real adapter:
litellm over HTTP against the local judge server answering in each form. The
metrics accept every form with no repair call and give the strict server's
scores; a still-invalid reply costs one repair call."""

from __future__ import annotations

import pytest
from judgeflow.metrics import HallucinationMetric, ToxicityMetric

from judgeflow.judge.retry import CallRetry
from judgeflow.judge.litellm_judge import LiteLLMJudge
from tests.support.judge_server import JudgeServer, Reply, reply_form_responder
from tests.support.reply_forms import LAX_FORMS

OUTPUTS = [
    "I think the plan is great. You are a clueless fool [toxic]. Fact: Paris is in France. [halluc=1.0]",
    "Fact: the museum opens at nine. The staff were lovely.",
    "Fact: the answer is 4. [halluc=0.5]",
]
CONTEXT = ["The museum opens at nine.", "Paris is in France."]


def score_all(server: JudgeServer) -> list[tuple]:
    judge = LiteLLMJudge("openai/judge-test", api_base=server.url, api_key="k", retry=CallRetry(max_retries=0))
    toxicity, hallucination = ToxicityMetric(judge, async_mode=False), HallucinationMetric(judge)
    rows = []
    for output in OUTPUTS:
        tox = toxicity.score("q", output)
        hal = hallucination.score("q", output, CONTEXT)
        rows.append((tox.score, tox.passed, tox.reason, tox.judge_calls, hal.score, hal.passed, hal.reason))
    return rows


@pytest.fixture(scope="module")
def strict_scores() -> list[tuple]:
    with JudgeServer() as server:
        scores = score_all(server)
    assert [row[0] for row in scores] == [1 / 3, 0.0, 0.0] and [row[4] for row in scores] == [1.0, 0.0, 0.5]
    return scores


@pytest.mark.parametrize("form", sorted(LAX_FORMS))
def test_every_form_is_accepted_through_litellm_without_a_repair(form: str, strict_scores) -> None:
    with JudgeServer(reply_form_responder(form)) as server:
        scores = score_all(server)
        calls = server.calls()
        assert all(len(request.messages) == 2 for request in server.requests)  # no repair re-ask
    assert scores == strict_scores
    assert calls == sum(row[3] for row in strict_scores) + len(OUTPUTS)


def test_a_still_invalid_reply_costs_one_repair_through_litellm(strict_scores) -> None:
    with JudgeServer(reply_form_responder("prose")) as server:
        server.script(Reply(content='{"score": 1.5, "reason": ["out of range"]}'))
        judge = LiteLLMJudge("openai/judge-test", api_base=server.url, api_key="k", retry=CallRetry(max_retries=0))
        result = HallucinationMetric(judge).score("q", OUTPUTS[0], CONTEXT)
        assert server.calls() == 2 and len(server.requests[1].messages) == 4
    assert (result.score, result.judge_calls) == (strict_scores[0][4], 2)
