"""The adapter's batch calls (judgeflow/judge/litellm_batches.py), over real HTTP
to the test judge server's Files and Batches API."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel

from judgeflow.errors import PermanentJudgeError, TransientJudgeError
from judgeflow.judge.base import JudgeReply, JudgeRequest
from judgeflow.judge.config import JudgeConfig
from judgeflow.judge.litellm_batches import LiteLLMBatches, batch_providers
from judgeflow.judge.litellm_judge import LiteLLMJudge, model_batch_prices, model_prices
from judgeflow.metrics.data_block import render_data_block
from tests.support.judge_server import JudgeServer, Reply, error_reply

KEY = "sk-batch-secret-0123456789abcdef"
PRICES = (2.0, 8.0)


class Opinions(BaseModel):
    opinions: list[str]


def opinions_request(output: str, model: str | None = None) -> JudgeRequest:
    fields = {"input": "hi", "output": output}
    return JudgeRequest(step="toxicity.opinions", response_format=Opinions, fields=fields, model=model,
                        messages=[{"role": "system", "content": "Extract the author's opinions."},
                                  {"role": "user", "content": "Data:\n" + render_data_block(fields)}])


def config(server: JudgeServer, model: str = "openai/judge-test", **kw) -> JudgeConfig:
    return JudgeConfig(model=model, api_base=server.url, api_key=KEY, timeout_s=10, **kw)


async def night(batches: LiteLLMBatches, server: JudgeServer, lines, model: str | None = None):
    batch_id = await batches.submit(lines, {"run": "test"})
    server.batch_api.wait_for(batch_id)
    status = await batches.retrieve(batch_id, model)
    return status, await batches.results(status, model)


OUTPUTS = ["I think cats rule. Fact: water is wet.", "Dogs drool [toxic]. Birds sing."]


def test_a_batch_gives_the_online_replies_at_the_batch_price():
    with JudgeServer(prices_per_mtok=PRICES, batch_discount=0.5) as server:
        cfg = config(server, prices_per_mtok=PRICES, batch_discount=0.5)
        online = [LiteLLMJudge.from_config(cfg).complete(opinions_request(o)) for o in OUTPUTS]
        online_bodies = [r.raw for r in server.requests]
        online_bill = server.billed_usd
        batches = LiteLLMBatches.from_config(cfg)
        status, results = asyncio.run(night(batches, server, [(f"pair-{i}", opinions_request(o))
                                                              for i, o in enumerate(OUTPUTS)]))
        batch_bill = server.billed_batch_usd
        line_bodies = [r.raw for r in server.requests[len(OUTPUTS):]]
    assert status.status == "completed" and status.done and not status.dead
    assert (status.total, status.completed, status.failed) == (2, 2, 0)
    assert status.expires_at - status.created_at == 24 * 3600
    assert set(results) == {"pair-0", "pair-1"}
    for i, reply in enumerate(online):
        got = results[f"pair-{i}"]
        assert isinstance(got, JudgeReply)
        assert (got.content, got.model, got.prompt_tokens, got.completion_tokens) == (
            reply.content, reply.model, reply.prompt_tokens, reply.completion_tokens)
        assert got.cost_usd == pytest.approx(0.5 * reply.cost_usd)
    assert json.loads(results["pair-1"].content) == {"opinions": ["Dogs drool [toxic]", "Birds sing"]}
    # the line's body is the online request's body
    for line_body, online_body in zip(line_bodies, online_bodies):
        assert {"model", "messages", "temperature", "response_format"} <= set(line_body)
        assert {k: online_body.get(k) for k in line_body} == line_body
    # the judge's spend is the server's bill, online and in batch
    assert sum(r.cost_usd for r in online) == pytest.approx(online_bill)
    assert sum(r.cost_usd for r in results.values()) == pytest.approx(batch_bill)


def test_litellms_batch_prices_price_a_mapped_model():
    assert model_batch_prices("gpt-4o-mini") == pytest.approx((7.5e-08, 3e-07))
    assert model_batch_prices("openai/judge-test") is None
    with JudgeServer() as server:
        batches = LiteLLMBatches(config(server, model="openai/gpt-4o-mini"))
        _, results = asyncio.run(night(batches, server, [("a", opinions_request(OUTPUTS[0]))]))
    reply = results["a"]
    assert reply.model == "openai/gpt-4o-mini"
    assert reply.cost_usd == pytest.approx(reply.prompt_tokens * 7.5e-08 + reply.completion_tokens * 3e-07)
    online = model_prices("gpt-4o-mini")
    assert reply.cost_usd < reply.prompt_tokens * online[0] + reply.completion_tokens * online[1]


def test_failed_lines_are_the_online_paths_typed_errors():
    with JudgeServer() as server:
        server.script(error_reply(429, f"slow down {KEY}"), error_reply(503, "overloaded"),
                      error_reply(400, "bad schema"), Reply(status=200, body="<html>proxy page</html>"))
        batches = LiteLLMBatches(config(server))
        status, results = asyncio.run(night(batches, server, [(c, opinions_request("x")) for c in "abcd"]))
    assert status.status == "completed" and (status.completed, status.failed) == (1, 3)
    assert isinstance(results["d"], TransientJudgeError) and "unreadable" in str(results["d"])
    assert isinstance(results["a"], TransientJudgeError) and results["a"].status_code == 429
    assert KEY not in str(results["a"]) and "slow down" in str(results["a"])
    assert isinstance(results["b"], TransientJudgeError) and results["b"].status_code == 503
    assert isinstance(results["c"], PermanentJudgeError) and results["c"].status_code == 400
    assert "bad schema" in str(results["c"])


def test_an_expired_batchs_lines_are_transient_and_say_so():
    with JudgeServer() as server:
        server.hold_batches()
        batches = LiteLLMBatches(config(server))

        async def go():
            batch_id = await batches.submit([("a", opinions_request("x")), ("b", opinions_request("y"))])
            server.batch_api.wait_for(batch_id, ("in_progress",))
            assert (await batches.retrieve(batch_id)).status == "in_progress"
            server.expire_batch(batch_id)
            status = await batches.retrieve(batch_id)
            return status, await batches.results(status)

        status, results = asyncio.run(go())
    assert status.status == "expired" and status.dead and status.failed == 2
    assert all(isinstance(e, TransientJudgeError) and e.batch_code == "batch_expired" for e in results.values())
    assert set(results) == {"a", "b"}


def test_cancel_and_a_cancelled_batch():
    with JudgeServer() as server:
        server.hold_batches()
        batches = LiteLLMBatches(config(server))

        async def go():
            batch_id = await batches.submit([("a", opinions_request("x"))])
            cancelling = await batches.cancel(batch_id)
            server.batch_api.wait_for(batch_id)
            status = await batches.retrieve(batch_id)
            return cancelling, status, await batches.results(status)

        cancelling, status, results = asyncio.run(go())
    assert cancelling.status == "cancelling" and not cancelling.done
    assert status.status == "cancelled" and status.dead and results == {}
    assert server.calls() == 0


def test_a_batch_asks_one_model_and_a_metric_model_gets_its_own():
    with JudgeServer() as server:
        batches = LiteLLMBatches(config(server, metric_models=("openai/other-judge",)))
        with pytest.raises(ValueError, match="one model"):
            asyncio.run(batches.submit([("a", opinions_request("x")),
                                        ("b", opinions_request("y", model="openai/other-judge"))]))
        _, results = asyncio.run(night(batches, server, [("b", opinions_request("y", model="openai/other-judge"))],
                                       model="openai/other-judge"))
        assert server.requests[-1].model == "other-judge"
    assert results["b"].model == "openai/other-judge"


def test_errors_of_the_batch_calls_are_typed_and_keep_the_key_out():
    with JudgeServer() as server:
        batches = LiteLLMBatches(config(server))
        with pytest.raises(PermanentJudgeError) as missing:
            asyncio.run(batches.retrieve("batch_nope"))
    assert missing.value.status_code == 404 and KEY not in str(missing.value)
    dead = LiteLLMBatches(JudgeConfig(model="openai/judge-test", api_base="http://127.0.0.1:9/v1", api_key=KEY,
                                      timeout_s=5))
    with pytest.raises(TransientJudgeError) as refused:
        asyncio.run(dead.submit([("a", opinions_request("x"))]))
    assert KEY not in str(refused.value)


def test_which_providers_can_batch():
    assert {"openai", "azure"} <= batch_providers()
    assert "anthropic" not in batch_providers()  # litellm creates no Anthropic batch
    cfg = JudgeConfig(model="openai/judge-test", api_base="http://127.0.0.1:9/v1", api_key=KEY)
    assert LiteLLMBatches(cfg).can_batch() is None
    reason = LiteLLMBatches(cfg).can_batch("anthropic/claude-3-5-haiku-20241022")
    assert reason is not None and "anthropic" in reason and "\n" not in reason and KEY not in reason
    assert "ollama" in LiteLLMBatches(cfg).can_batch("ollama/llama3")
    assert LiteLLMBatches(JudgeConfig(model="offline")).can_batch() is not None


def test_pack_splits_by_model_lines_and_bytes_and_submit_refuses_more():
    cfg = JudgeConfig(model="openai/judge-test", api_base="http://127.0.0.1:9/v1", api_key=KEY,
                      metric_models=("openai/other-judge",))
    own = [(f"o{i}", opinions_request(f"text {i}")) for i in range(5)]
    other = [(f"x{i}", opinions_request(f"text {i}", model="openai/other-judge")) for i in range(2)]
    lines = [own[0], other[0], *own[1:], other[1]]
    packed = LiteLLMBatches(cfg, max_lines=2).pack(lines)
    assert [[c for c, _ in batch] for batch in packed] == [["o0", "o1"], ["o2", "o3"], ["o4"], ["x0", "x1"]]
    one_line = len(LiteLLMBatches(cfg)._line(*own[0]))
    by_bytes = LiteLLMBatches(cfg, max_bytes=2 * one_line + 10).pack(own)
    assert [len(batch) for batch in by_bytes] == [2, 2, 1]
    assert LiteLLMBatches(cfg).pack(own) == [own]
    with pytest.raises(ValueError, match="over a batch file's limits"):
        asyncio.run(LiteLLMBatches(cfg, max_lines=2).submit(own))
    with pytest.raises(ValueError, match="alone is"):
        LiteLLMBatches(cfg, max_bytes=10).pack(own)


def test_find_looks_a_batch_up_by_its_metadata_page_by_page_no_further_back_than_asked(monkeypatch):
    """A run that never learnt its batch's id finds it by the token in its metadata: through the
    provider's list of batches (newest first, a page at a time), none created before ``since``."""
    monkeypatch.setattr("judgeflow.judge.litellm_batches._LIST_PAGE", 1)
    with JudgeServer() as server:
        batches = LiteLLMBatches.from_config(config(server))

        async def look() -> tuple:
            ids = [await batches.submit([(f"pair-{i}", opinions_request(OUTPUTS[0]))], {"tok": f"t{i}"})
                   for i in range(3)]
            found = [await batches.find("tok", f"t{i}", since=0) for i in range(3)]
            return ids, found, await batches.find("tok", "t9", since=0), \
                await batches.find("tok", "t0", since=server.batch_api.batches[ids[0]]["created_at"] + 1)

        ids, found, unknown, too_old = asyncio.run(look())
    assert found == ids
    assert unknown is None and too_old is None
