"""Prices of issue 49: cached prompt tokens read from litellm's usage and
priced at the cached rate (litellm's map, or the configured cached price),
and estimates at the batch rate when the run batches."""

from __future__ import annotations

from types import SimpleNamespace

import litellm
import pytest
from litellm import ModelResponse
from litellm.types.utils import PromptTokensDetailsWrapper, Usage as LiteLLMUsage

from judgeflow.errors import ConfigError
from judgeflow.judge.base import JudgeReply, JudgeRequest, Usage
from judgeflow.judge.litellm_judge import (
    cached_prompt_tokens, completion_cost_usd, model_batch_prices, model_cached_price, model_prices,
)
from judgeflow.judge.pricing import Prices, prices_for, require_prices
from judgeflow.metrics.cost import estimate_pair_cost
from judgeflow.judge.spend import CallSpend, usage_cost
from judgeflow.metrics.hallucination.schema import HallucinationJudgement
from judgeflow.config.settings import load_settings

# a model litellm's map prices with a cached rate and batch prices (checked below, not assumed)
CACHED_MODEL = "gpt-4o-mini"


def _settings(monkeypatch, tmp_path, **env):
    monkeypatch.chdir(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(f"JUDGEFLOW_{key.upper()}", value)
    return load_settings()


def _response(model: str, prompt: int, completion: int, cached: int) -> ModelResponse:
    return ModelResponse(
        model=model,
        choices=[{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
        usage=LiteLLMUsage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                           prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=cached)),
    )


# --- cached prompt tokens ----------------------------------------------------------------------------


def test_litellm_prices_cached_tokens_at_the_maps_cached_rate():
    info = litellm.get_model_info(CACHED_MODEL)
    cached_rate, input_rate, output_rate = (info["cache_read_input_token_cost"], info["input_cost_per_token"],
                                            info["output_cost_per_token"])
    assert 0 < cached_rate < input_rate  # the map gives this model a cached discount
    assert model_cached_price(CACHED_MODEL) == cached_rate

    cost = completion_cost_usd(_response(CACHED_MODEL, 1000, 100, 800))
    assert cost == pytest.approx(200 * input_rate + 800 * cached_rate + 100 * output_rate)
    uncached = completion_cost_usd(_response(CACHED_MODEL, 1000, 100, 0))
    assert uncached == pytest.approx(1000 * input_rate + 100 * output_rate)
    assert cost < uncached


def test_cached_tokens_are_read_from_openai_and_anthropic_usage():
    assert cached_prompt_tokens(_response(CACHED_MODEL, 1000, 100, 800).usage) == 800
    # Anthropic's cache reads, as litellm's usage carries them
    anthropic = LiteLLMUsage(prompt_tokens=1200, completion_tokens=10, total_tokens=1210,
                             cache_read_input_tokens=1000)
    assert cached_prompt_tokens(anthropic) == 1000
    assert cached_prompt_tokens(SimpleNamespace(cache_read_input_tokens=64)) == 64
    # a usage that says nothing about a cache, or nonsense: unknown
    assert cached_prompt_tokens(LiteLLMUsage(prompt_tokens=5, completion_tokens=1, total_tokens=6)) in (None, 0)
    assert cached_prompt_tokens(SimpleNamespace(prompt_tokens=5)) is None
    assert cached_prompt_tokens(SimpleNamespace(cache_read_input_tokens=-3)) is None
    assert cached_prompt_tokens(None) is None


def test_usage_cost_prices_cached_tokens_at_the_cached_rate_and_defaults_to_the_input_price():
    # 1,000 prompt tokens of which 600 cached, 100 completion, at $2 / $8 per million and $0.5 cached
    assert usage_cost((2.0, 8.0), 1000, 100, 600, 0.5) == pytest.approx((400 * 2.0 + 600 * 0.5 + 100 * 8.0) / 1e6)
    assert usage_cost((2.0, 8.0), 1000, 100, 600) == pytest.approx((1000 * 2.0 + 100 * 8.0) / 1e6)
    # more cached than prompt tokens (a provider's mistake) never makes the prompt cost negative
    assert usage_cost((2.0, 8.0), 100, 0, 500, 0.0) == 0.0
    assert Prices(2.0, 8.0, "t", cached_input_per_mtok=0.5).cost(1000, 100, 600) == usage_cost(
        (2.0, 8.0), 1000, 100, 600, 0.5)


def test_cached_tokens_add_up_over_replies_attempts_and_failures():
    request = JudgeRequest(step="hallucination", messages=[{"role": "user", "content": "x" * 400}],
                           response_format=HallucinationJudgement)
    spend = CallSpend("m", (2.0, 8.0), request)
    spend.unanswered()
    reply = spend.answered(JudgeReply(content="{}", model="m", prompt_tokens=300, completion_tokens=20,
                                      cached_tokens=256, cost_usd=0.001))
    assert (reply.cached_tokens, reply.calls) == (256, 2)
    usage = Usage()
    usage.add(reply)
    usage.add(JudgeReply(content="{}", model="m", prompt_tokens=10, completion_tokens=1, cached_tokens=None))
    failed = Usage(prompt_tokens=50, cached_tokens=32, calls=1)
    usage.merge(failed)
    assert (usage.prompt_tokens, usage.cached_tokens) == (360, 288)


def test_a_cached_price_is_a_discount_on_configured_prices(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="JUDGEFLOW_JUDGE_CACHED_INPUT_COST_PER_MTOK"):
        _settings(monkeypatch, tmp_path, judge_cached_input_cost_per_mtok="0.5")
    s = _settings(monkeypatch, tmp_path, judge_model="openai/my-self-hosted", judge_input_cost_per_mtok="2",
                  judge_output_cost_per_mtok="8", judge_cached_input_cost_per_mtok="0.5")
    prices = prices_for(s)
    assert (prices.input_per_mtok, prices.output_per_mtok, prices.cached_input_per_mtok) == (2.0, 8.0, 0.5)
    from judgeflow.judge.config import JudgeConfig

    assert JudgeConfig.from_settings(s).cached_price_per_mtok == 0.5


# --- the batch rate ------------------------------------------------------------------------------


def test_estimates_use_litellms_batch_prices_when_the_run_batches(monkeypatch, tmp_path):
    batch = model_batch_prices(CACHED_MODEL)
    online = model_prices(CACHED_MODEL)
    assert batch is not None and online is not None and batch[0] < online[0]
    online_settings = _settings(monkeypatch, tmp_path, judge_model=CACHED_MODEL)
    s = _settings(monkeypatch, tmp_path, judge_model=CACHED_MODEL, judge_batch="true")
    prices = require_prices(s, why="a run budget is set")
    assert (prices.input_per_mtok, prices.output_per_mtok) == pytest.approx((batch[0] * 1e6, batch[1] * 1e6))
    assert prices.source == f"litellm's batch prices for {CACHED_MODEL}"
    assert prices_for(s, online=True) == prices_for(online_settings)
    assert prices_for(online_settings).source == f"litellm's price map for {CACHED_MODEL}"
    pair = dict(input="q" * 400, output="a" * 400, context=None)
    assert estimate_pair_cost(prices, "toxicity", **pair) < estimate_pair_cost(prices_for(online_settings),
                                                                               "toxicity", **pair)


def test_without_a_map_batch_price_the_online_price_is_discounted(monkeypatch, tmp_path):
    # a model the map prices online but not through batches
    model = "gpt-4"
    assert model_batch_prices(model) is None
    online = model_prices(model)
    s = _settings(monkeypatch, tmp_path, judge_model=model, judge_batch="true", judge_batch_discount="0.4")
    prices = prices_for(s)
    assert (prices.input_per_mtok, prices.output_per_mtok) == pytest.approx((online[0] * 0.4e6, online[1] * 0.4e6))
    assert prices.source == f"litellm's price map for {model} x JUDGEFLOW_JUDGE_BATCH_DISCOUNT=0.4"


def test_configured_prices_are_discounted_and_say_so(monkeypatch, tmp_path):
    s = _settings(monkeypatch, tmp_path, judge_model="openai/my-self-hosted", judge_input_cost_per_mtok="2",
                  judge_output_cost_per_mtok="8", judge_cached_input_cost_per_mtok="1", judge_batch="true")
    prices = prices_for(s)
    assert (prices.input_per_mtok, prices.output_per_mtok, prices.cached_input_per_mtok) == (1.0, 4.0, 0.5)
    assert prices.source == "JUDGEFLOW_JUDGE_INPUT/OUTPUT_COST_PER_MTOK x JUDGEFLOW_JUDGE_BATCH_DISCOUNT=0.5"
    assert prices_for(s, online=True).input_per_mtok == 2.0
    for name in ("INPUT", "OUTPUT", "CACHED_INPUT"):
        monkeypatch.delenv(f"JUDGEFLOW_JUDGE_{name}_COST_PER_MTOK")
    offline = prices_for(_settings(monkeypatch, tmp_path, judge_model="offline"))
    assert offline.cost(1e6, 1e6) == 0.0 and offline.source == "the offline judge is free"


@pytest.mark.parametrize("discount", ["0", "1.5", "-0.5"])
def test_a_discount_outside_zero_to_one_is_refused(monkeypatch, tmp_path, discount):
    with pytest.raises(ConfigError, match="judge_batch_discount"):
        _settings(monkeypatch, tmp_path, judge_batch_discount=discount)


# --- over HTTP: the test judge server reports cached tokens as a provider with a prefix cache does -------


def test_cached_tokens_reach_the_reply_and_cost_what_the_server_billed():
    from tests.support.judge_server import JudgeServer
    from judgeflow.judge.litellm_judge import LiteLLMJudge
    from judgeflow.metrics.hallucination.template import hallucination_messages

    # caches from 256 tokens in 64-token blocks; bills cached tokens at a quarter of $2: the configured $0.5
    with JudgeServer(prices_per_mtok=(2.0, 8.0), cached_fraction=0.25, cache_min_tokens=256,
                     cache_block_tokens=64) as server:
        judge = LiteLLMJudge("openai/judge-test", api_base=server.url, api_key="k", prices_per_mtok=(2.0, 8.0),
                             cached_price_per_mtok=0.5)
        replies = []
        for output in ("Fact: the sky is blue.", "Fact: the museum opens at nine on Sundays."):
            before = server.billed_usd
            replies.append((judge.complete(JudgeRequest(
                step="hallucination", response_format=HallucinationJudgement,
                messages=hallucination_messages("q", output, ["The sky is blue."]),
            )), server.billed_usd - before))
        judge.close()
    (first, first_billed), (second, second_billed) = replies
    assert first.cached_tokens == 0  # nothing seen before it
    # the second shares the fixed part, everything before its data block, with the first
    assert 256 <= second.cached_tokens < second.prompt_tokens
    for reply, billed in replies:
        assert reply.cost_usd == pytest.approx(usage_cost((2.0, 8.0), reply.prompt_tokens, reply.completion_tokens,
                                                          reply.cached_tokens, 0.5))
        assert reply.cost_usd == pytest.approx(billed)
    assert second.cost_usd < usage_cost((2.0, 8.0), second.prompt_tokens, second.completion_tokens)
