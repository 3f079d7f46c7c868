"""Every attempt the adapter sends is spend: the reply's usage, or the
attempt's estimate when no usage came back (judgeflow/judge/spend.py),
against the real adapter and the local judge server over HTTP."""

from __future__ import annotations

import asyncio

import pytest

from judgeflow.errors import PermanentJudgeError, TransientJudgeError
from judgeflow.judge.base import JudgeReply, Usage
from judgeflow.judge.retry import CallRetry
from judgeflow.judge.litellm_judge import LiteLLMJudge
from judgeflow.judge.spend import attempt_estimate
from tests.judge.test_litellm_judge import API_KEY, MODEL, opinions_request
from tests.support.judge_server import JudgeServer, Reply, error_reply, json_reply

PRICES = (1.0, 4.0)  # USD per million prompt / completion tokens, the server's and the judge's


@pytest.fixture
def server():
    with JudgeServer(prices_per_mtok=PRICES, stall_s=600.0) as srv:
        yield srv


def judge_for(server: JudgeServer, *, max_retries: int = 2, **kwargs) -> LiteLLMJudge:
    # the stalled replies never come while the client waits (the server's stop wakes them); an answered
    # attempt has 1.5 s, which no loaded machine needs for a local reply (0.5 s timed answers out too)
    opts = dict(api_base=server.url, api_key=API_KEY, timeout_s=1.5, prices_per_mtok=PRICES,
                retry=CallRetry(max_retries=max_retries, backoff_base_s=0.01, backoff_max_s=0.02))
    opts.update(kwargs)
    return LiteLLMJudge(MODEL, **opts)


def stalled() -> Reply:
    return json_reply({"opinions": ["late"]}, delay_s=600.0)


def test_timed_out_attempts_before_an_answer_are_counted_at_their_estimate(server):
    server.script(stalled(), stalled())
    request = opinions_request()
    reply = asyncio.run(judge_for(server).acomplete(request))
    assert isinstance(reply, JudgeReply)
    assert server.calls() == 3 and reply.calls == 3
    answered = (reply.prompt_tokens * PRICES[0] + reply.completion_tokens * PRICES[1]) / 1e6
    assert reply.cost_usd == pytest.approx(answered + 2 * attempt_estimate(PRICES, request))
    assert server.billed_requests == 3  # the provider bills the two it answered too late as well


def test_a_call_that_never_answers_carries_its_attempts_on_the_error(server):
    server.script(stalled(), stalled(), stalled())
    request = opinions_request()
    with pytest.raises(TransientJudgeError) as info:
        judge_for(server).complete(request)
    billed = info.value.billed
    assert isinstance(billed, Usage)
    assert billed.calls == 3 == server.calls()
    assert billed.cost_usd == pytest.approx(3 * attempt_estimate(PRICES, request))


def test_rate_limits_and_refusals_are_not_billed(server):
    server.script(error_reply(429, "slow down", headers={"Retry-After": "0"}), error_reply(400, "bad"))
    with pytest.raises(PermanentJudgeError) as info:
        judge_for(server).complete(opinions_request())
    assert server.calls() == 2
    assert info.value.billed.calls == 0 and info.value.billed.cost_usd is None


def test_a_server_error_after_send_is_billed_at_its_estimate(server):
    server.script(error_reply(500, "boom"))
    reply = judge_for(server).complete(opinions_request())
    assert reply.calls == 2


def test_an_unpriced_model_counts_calls_with_an_unknown_cost(server):
    server.script(stalled())
    reply = judge_for(server, prices_per_mtok=None).complete(opinions_request())
    assert reply.calls == 2 and reply.cost_usd is None


def test_connection_refused_is_not_billed():
    judge = LiteLLMJudge(MODEL, api_base="http://127.0.0.1:9/v1", api_key=API_KEY, timeout_s=2,
                         retry=CallRetry(max_retries=1, backoff_base_s=0.01, backoff_max_s=0.01), prices_per_mtok=PRICES)
    with pytest.raises(TransientJudgeError) as info:
        judge.complete(opinions_request())
    assert info.value.billed.calls == 0
