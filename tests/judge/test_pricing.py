"""The cost model: prices from settings or litellm's map, cost_usd filled from
configured prices, and a clear refusal when nothing prices the model."""

from __future__ import annotations

import pytest

from judgeflow.errors import ConfigError
from judgeflow.judge.base import JudgeRequest
from judgeflow.judge.litellm_judge import LiteLLMJudge
from judgeflow.judge.pricing import Prices, prices_for, require_prices
from judgeflow.metrics.cost import estimate_pair_cost, estimate_tokens
from judgeflow.metrics.hallucination.schema import HallucinationJudgement
from judgeflow.metrics.data_block import render_data_block
from judgeflow.config.settings import load_settings


def _settings(monkeypatch, tmp_path, **env):
    monkeypatch.chdir(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(f"JUDGEFLOW_{key.upper()}", value)
    return load_settings()


def test_configured_prices_win_then_litellm_then_refusal(monkeypatch, tmp_path):
    s = _settings(monkeypatch, tmp_path, judge_model="openai/gpt-4o-mini")
    assert prices_for(s).input_per_mtok == pytest.approx(0.15)
    assert prices_for(s).output_per_mtok == pytest.approx(0.6)
    s = _settings(monkeypatch, tmp_path, judge_model="openai/my-self-hosted")
    assert prices_for(s) is None
    with pytest.raises(ConfigError, match="JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK"):
        require_prices(s, why="a run budget is set")
    s = _settings(monkeypatch, tmp_path, judge_model="openai/my-self-hosted",
                  judge_input_cost_per_mtok="2", judge_output_cost_per_mtok="8")
    assert (prices_for(s).input_per_mtok, prices_for(s).output_per_mtok) == (2.0, 8.0)
    monkeypatch.delenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK")
    monkeypatch.delenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK")
    assert prices_for(_settings(monkeypatch, tmp_path, judge_model="offline")).cost(1e6, 1e6) == 0.0


def test_one_price_without_the_other_is_refused(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="set both"):
        _settings(monkeypatch, tmp_path, judge_input_cost_per_mtok="1")


def test_configured_prices_fill_cost_usd_from_the_reported_usage(judge_server):
    judge = LiteLLMJudge("openai/judge-test", api_base=judge_server.url, api_key="k",
                         prices_per_mtok=(2.0, 8.0))
    reply = judge.complete(JudgeRequest(
        step="hallucination", response_format=HallucinationJudgement,
        messages=[{"role": "user", "content": render_data_block({"output": "Fact: x.", "context": ["x"]})}],
    ))
    assert reply.prompt_tokens > 0 and reply.completion_tokens > 0
    assert reply.cost_usd == pytest.approx((reply.prompt_tokens * 2.0 + reply.completion_tokens * 8.0) / 1e6)
    unpriced = LiteLLMJudge("openai/judge-test", api_base=judge_server.url, api_key="k")
    assert unpriced.complete(JudgeRequest(
        step="hallucination", response_format=HallucinationJudgement,
        messages=[{"role": "user", "content": render_data_block({"output": "Fact: x."})}],
    )).cost_usd is None


def test_the_pair_estimate_grows_with_the_text_and_respects_truncation():
    prices = Prices(1.0, 1.0, "test")
    small = estimate_pair_cost(prices, "hallucination", input="q", output="a", context=None)
    big = estimate_pair_cost(prices, "hallucination", input="q", output="a" * 4000, context=["c" * 4000])
    assert big > small > 0
    # hallucination: (2050 overhead + 1 + 4000 + len('["' + 4000 c + '"]')) / 4 prompt tokens, 60 completion
    assert big == pytest.approx(((2050 + 1 + 4000 + 4004) / 4 + 60) / 1e6)
    capped = estimate_tokens("toxicity", input_chars=0, output_chars=50_000, context_chars=0, max_field_chars=1000)
    assert capped == ((5700 + 2 * 1000) / 4, 120 + 1000 / 4)


METRIC_FILE = '''
[metrics.grounded]
criteria = "Every claim of the reply is supported by the context."
evaluation_steps = ["Check each claim against the context."]
inputs = ["output", "context"]
model = "{model}"
'''


def test_a_request_naming_a_model_asks_it_and_is_priced_at_its_map_price(judge_server):
    """A metric's own model on the judge's endpoint: the configured prices are the judge's model's, never its."""
    judge = LiteLLMJudge("openai/judge-test", api_base=judge_server.url, api_key="k", prices_per_mtok=(2.0, 8.0),
                         metric_models=("openai/gpt-4o-mini", "openai/my-self-hosted"))
    request = JudgeRequest(step="hallucination", response_format=HallucinationJudgement, model="openai/gpt-4o-mini",
                           messages=[{"role": "user", "content": render_data_block({"output": "Fact: x."})}])
    reply = judge.complete(request)
    assert judge_server.requests[-1].model == "gpt-4o-mini" and reply.model == "openai/gpt-4o-mini"
    assert reply.cost_usd == pytest.approx((reply.prompt_tokens * 0.15 + reply.completion_tokens * 0.6) / 1e6)
    own = judge.complete(JudgeRequest(step="hallucination", response_format=HallucinationJudgement,
                                      messages=request.messages))
    assert judge_server.requests[-1].model == "judge-test" and own.model == "openai/judge-test"
    assert own.cost_usd == pytest.approx((own.prompt_tokens * 2.0 + own.completion_tokens * 8.0) / 1e6)
    # what a judge worker's hello carries: every model it may ask, the unpriced one as None
    assert judge.prices_by_model() == {"openai/judge-test": (2.0, 8.0),
                                       "openai/gpt-4o-mini": (pytest.approx(0.15), pytest.approx(0.6)),
                                       "openai/my-self-hosted": None}
    judge.close()


def test_a_metric_with_its_own_model_is_priced_at_it_and_an_unpriced_one_refuses_a_budget(monkeypatch, tmp_path):
    from judgeflow.run.metric_door import open_metrics

    path = tmp_path / "metrics.toml"
    path.write_text(METRIC_FILE.format(model="openai/gpt-4o"), encoding="utf-8")
    try:
        open_metrics(path)  # as the command's entry point does: estimates read the served metrics' costs
        s = _settings(monkeypatch, tmp_path, judge_model="openai/gpt-4o-mini", metrics_file=str(path))
        prices = prices_for(s)
        assert (prices.of("toxicity").input_per_mtok, prices.of("toxicity").output_per_mtok) == (
            pytest.approx(0.15), pytest.approx(0.6))
        assert (prices.of("grounded").input_per_mtok, prices.of("grounded").output_per_mtok) == (
            pytest.approx(2.5), pytest.approx(10.0))
        pair = {"input": "q", "output": "a" * 400, "context": ["c" * 400]}
        tokens = estimate_tokens("grounded", input_chars=1, output_chars=400, context_chars=404)
        assert estimate_pair_cost(prices, "grounded", **pair) == pytest.approx((tokens[0] * 2.5 + tokens[1] * 10) / 1e6)
        # a shadow's candidate judges every metric: its own prices for all
        assert prices_for(s, own_models=False).of("grounded").input_per_mtok == pytest.approx(0.15)

        path.write_text(METRIC_FILE.format(model="openai/my-self-hosted"), encoding="utf-8")
        s = _settings(monkeypatch, tmp_path, judge_model="openai/gpt-4o-mini", metrics_file=str(path))
        assert prices_for(s) is None
        with pytest.raises(ConfigError) as error:
            require_prices(s, why="a run budget is set")
        assert str(error.value).startswith("a run budget is set, but litellm has no price for judge model "
                                           "'openai/my-self-hosted', the judge model of metric(s) grounded")
        # the offline run judges every metric offline, whatever its model: free
        s = _settings(monkeypatch, tmp_path, judge_model="offline", metrics_file=str(path))
        assert prices_for(s).of("grounded").cost(1e6, 1e6) == 0.0
    finally:
        open_metrics(None)
