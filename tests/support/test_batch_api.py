"""The judge server's Files and Batches API, driven over real HTTP by litellm's
public batch functions (custom_llm_provider="openai" and an api_base)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import litellm
import pytest

from judgeflow.metrics.data_block import render_data_block
from tests.support.judge_server import JudgeServer, Reply, error_reply

PRICES = (2.0, 8.0)  # USD per million prompt, completion tokens


def line(custom_id: str, output: str, step: str = "Opinions", system: str = "rubric",
         model: str = "judge-test") -> dict:
    body = {"model": model, "temperature": 0,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": "Judge this.\n" + render_data_block({"input": "q", "output": output})}],
            "response_format": {"type": "json_schema", "json_schema": {"name": step, "schema": {}, "strict": True}}}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def kwargs(server: JudgeServer) -> dict:
    return {"custom_llm_provider": "openai", "api_base": server.url, "api_key": "k", "max_retries": 0}


async def submit(server: JudgeServer, lines: list[dict], metadata: dict | None = None):
    data = "".join(json.dumps(item) + "\n" for item in lines).encode()
    uploaded = await litellm.acreate_file(file=("night.jsonl", data, "application/jsonl"), purpose="batch",
                                          **kwargs(server))
    return await litellm.acreate_batch(completion_window="24h", endpoint="/v1/chat/completions",
                                       input_file_id=uploaded.id, metadata=metadata or {}, **kwargs(server))


async def file_lines(server: JudgeServer, file_id: str | None) -> dict[str, dict]:
    if file_id is None:
        return {}
    content = await litellm.afile_content(file_id=file_id, **kwargs(server))
    return {item["custom_id"]: item for item in map(json.loads, content.content.decode().splitlines())}


async def finished(server: JudgeServer, batch_id: str):
    server.batch_api.wait_for(batch_id)
    return await litellm.aretrieve_batch(batch_id=batch_id, **kwargs(server))


def run(coro):
    return asyncio.run(coro)


def test_a_batch_completes_with_each_line_answered_as_a_chat_request():
    with JudgeServer(prices_per_mtok=PRICES) as server:
        async def go():
            created = await submit(server, [line("a", "Cats rule. Fact: water is wet."), line("b", "I hate it [toxic].")],
                                   {"run": "night-1"})
            assert created.status == "validating" and created.metadata == {"run": "night-1"}
            assert created.expires_at - created.created_at == 24 * 3600
            batch = await finished(server, created.id)
            return batch, await file_lines(server, batch.output_file_id)

        batch, output = run(go())
    assert batch.status == "completed" and batch.error_file_id is None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (2, 2, 0)
    assert batch.in_progress_at is not None and batch.finalizing_at is not None and batch.completed_at is not None
    assert set(output) == {"a", "b"}
    answer = output["a"]["response"]
    assert answer["status_code"] == 200 and output["a"]["error"] is None and answer["request_id"]
    assert json.loads(answer["body"]["choices"][0]["message"]["content"]) == {"opinions": ["Cats rule"]}
    assert json.loads(output["b"]["response"]["body"]["choices"][0]["message"]["content"]) == {
        "opinions": ["I hate it [toxic]"]}
    assert server.calls("Opinions") == 2 and server.batches_created == 1 and server.files_uploaded == 1
    assert server.lines_received(batch.id) == 2


def test_a_failing_line_goes_to_the_error_file_as_openai_writes_it():
    with JudgeServer() as server:
        server.script(Reply(content='{"opinions": []}'), error_reply(429, "slow down"), Reply(content="not json at all"))

        async def go():
            batch = await finished(server, (await submit(server, [line("ok", "x"), line("limited", "y"),
                                                                  line("garbage", "z")])).id)
            return batch, await file_lines(server, batch.output_file_id), await file_lines(server, batch.error_file_id)

        batch, output, errors = run(go())
    assert batch.status == "completed"
    assert (batch.request_counts.completed, batch.request_counts.failed) == (2, 1)
    assert set(output) == {"ok", "garbage"} and set(errors) == {"limited"}
    assert output["garbage"]["response"]["body"]["choices"][0]["message"]["content"] == "not json at all"
    limited = errors["limited"]["response"]
    assert limited["status_code"] == 429 and limited["body"]["error"]["message"] == "slow down"


def test_an_expired_batch_puts_the_lines_not_run_in_its_error_file():
    with JudgeServer() as server:
        server.hold_batches()

        async def go():
            created = await submit(server, [line("a", "x"), line("b", "y")])
            server.batch_api.wait_for(created.id, ("in_progress",))
            server.expire_batch(created.id)
            batch = await finished(server, created.id)
            return batch, await file_lines(server, batch.error_file_id)

        batch, errors = run(go())
    assert batch.status == "expired" and batch.expired_at is not None and batch.output_file_id is None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (0, 2)
    assert {k: v["error"]["code"] for k, v in errors.items()} == {"a": "batch_expired", "b": "batch_expired"}
    assert all(v["response"] is None for v in errors.values())
    assert server.calls() == 0 and server.billed_requests == 0  # nothing ran, nothing billed


def test_a_cancelled_batch_ends_cancelled_and_answers_nothing_more():
    with JudgeServer() as server:
        server.hold_batches()

        async def go():
            created = await submit(server, [line("a", "x")])
            server.batch_api.wait_for(created.id, ("in_progress",))
            cancelling = await litellm.acancel_batch(batch_id=created.id, **kwargs(server))
            batch = await finished(server, created.id)
            server.release_batches()
            with pytest.raises(Exception) as again:  # a batch already ended cannot be cancelled
                await litellm.acancel_batch(batch_id=created.id, **kwargs(server))
            listed = await litellm.alist_batches(**kwargs(server))
            return cancelling, batch, again.value, listed

        cancelling, batch, again, listed = run(go())
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    assert batch.status == "cancelled" and batch.cancelled_at is not None and batch.output_file_id is None
    assert getattr(again, "status_code", None) == 409
    assert [b.id for b in listed.data] == [batch.id] and listed.data[0].status == "cancelled"
    assert server.calls() == 0


def test_a_batch_cancelled_part_way_keeps_the_lines_it_answered_in_its_output():
    with JudgeServer() as server:
        server.hold_batches()
        server.batch_api.answer_held(2)  # held, but its first two lines answered

        async def go():
            created = await submit(server, [line("a", "x"), line("b", "y"), line("c", "z")])
            server.batch_api.wait_for(created.id, ("in_progress",))
            deadline = time.monotonic() + 60
            while server.batch_api.batches[created.id]["request_counts"]["completed"] < 2:
                assert time.monotonic() < deadline, "two lines not answered"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # the third is not answered, however long one waits
            assert server.batch_api.batches[created.id]["request_counts"]["completed"] == 2
            await litellm.acancel_batch(batch_id=created.id, **kwargs(server))
            batch = await finished(server, created.id)
            return batch, await file_lines(server, batch.output_file_id)

        batch, output = run(go())
    assert batch.status == "cancelled" and (batch.request_counts.completed, batch.request_counts.total) == (2, 3)
    assert sorted(output) == ["a", "b"] and server.calls() == 2 and server.billed_requests == 2


def test_a_batch_finishes_while_nobody_polls():
    with JudgeServer(batch_turnaround_s=0.2) as server:
        batch_id = run(submit(server, [line("a", "Cats rule."), line("b", "Dogs too.")])).id
        # the client and its event loop are gone: the server's own thread answers the lines
        done = server.batch_api.wait_for(batch_id)
        assert done["status"] == "completed" and done["request_counts"]["completed"] == 2
        assert done["completed_at"] >= done["created_at"]
        stats = json.loads(urllib.request.urlopen(server.url.removesuffix("/v1") + "/stats", timeout=10).read())
    assert stats["batches_created"] == 1 and stats["files_uploaded"] == 1
    assert stats["lines_received"] == {batch_id: 2} and stats["batch_statuses"] == {"completed": 1}


def test_batch_lines_are_billed_at_the_batch_rate():
    texts = ["Cats rule. Dogs drool.", "It is fine.", "Nothing [toxic] here."]
    with JudgeServer(prices_per_mtok=PRICES, batch_discount=0.4) as server:
        batch = run(finished(server, run(submit(server, [line(str(i), t) for i, t in enumerate(texts)])).id))
        assert batch.status == "completed"
        usages = [item["response"]["body"]["usage"] for item in run(file_lines(server, batch.output_file_id)).values()]
        online = sum(u["prompt_tokens"] * PRICES[0] + u["completion_tokens"] * PRICES[1] for u in usages) / 1e6
        assert online > 0
        assert server.billed_batch_usd == pytest.approx(0.4 * online)
        assert server.billed_usd == pytest.approx(server.billed_batch_usd) and server.billed_requests == 3


def test_a_repeated_long_prefix_is_reported_cached_and_billed_at_the_cached_rate():
    rubric = "A long fixed rubric. " * 40  # 840 characters: 210 tokens of fixed prefix
    with JudgeServer(prices_per_mtok=PRICES, cache_min_tokens=64, cache_block_tokens=16, cached_fraction=0.25,
                     batch_turnaround_s=0.0) as server:
        batch = run(finished(server, run(submit(server, [line("first", "One.", system=rubric),
                                                         line("second", "Two.", system=rubric),
                                                         line("short", "Three.")])).id))
        output = run(file_lines(server, batch.output_file_id))
        usage = {k: v["response"]["body"]["usage"] for k, v in output.items()}
        billed = server.billed_batch_usd
    assert usage["first"]["prompt_tokens_details"]["cached_tokens"] == 0  # nothing seen before it
    cached = usage["second"]["prompt_tokens_details"]["cached_tokens"]
    assert 64 <= cached <= usage["second"]["prompt_tokens"] and (cached - 64) % 16 == 0
    assert cached >= 208 - 16  # the rubric's blocks at least, less the one cut by the data block
    assert usage["short"]["prompt_tokens_details"]["cached_tokens"] == 0  # under the minimum
    full = sum(u["prompt_tokens"] * PRICES[0] + u["completion_tokens"] * PRICES[1] for u in usage.values()) / 1e6
    assert billed == pytest.approx(0.5 * (full - cached * PRICES[0] * 0.75 / 1e6))
    assert usage["second"]["prompt_tokens"] == usage["first"]["prompt_tokens"]  # usage otherwise as before


def test_online_replies_carry_cached_tokens_too():
    from openai import OpenAI

    rubric = "The same instructions every time. " * 20
    with JudgeServer(cache_min_tokens=32, cache_block_tokens=8) as server:
        client = OpenAI(base_url=server.url, api_key="k", max_retries=0)
        first, second = (client.chat.completions.create(**line(str(i), text, system=rubric)["body"])
                         for i, text in enumerate(["One.", "Two."]))
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens >= 160
    assert server.cached_tokens == second.usage.prompt_tokens_details.cached_tokens


def test_a_file_mixing_models_or_repeating_an_id_fails_its_batch():
    with JudgeServer() as server:
        async def go():
            mixed = await finished(server, (await submit(server, [line("a", "x"), line("b", "y", model="other")])).id)
            repeated = await finished(server, (await submit(server, [line("a", "x"), line("a", "y")])).id)
            return mixed, repeated

        mixed, repeated = run(go())
    assert mixed.status == "failed" and [e.code for e in mixed.errors.data] == ["mismatched_model"]
    assert repeated.status == "failed" and [e.code for e in repeated.errors.data] == ["duplicate_custom_id"]
    assert server.calls() == 0


def test_as_a_process_the_turnaround_discount_and_prices_are_flags():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.judge_server", "--port", "0",
                             "--batch-turnaround", "0.5", "--batch-discount", "0.25", "--prices", "2,8"],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        server = JudgeServer()  # only its url, for the helpers' keyword arguments
        server.url = url
        created = run(submit(server, [line("a", "Cats rule.")]))
        stats_url = url.removesuffix("/v1") + "/stats"
        first = json.loads(urllib.request.urlopen(stats_url, timeout=10).read())
        deadline = time.monotonic() + 60
        while (stats := json.loads(urllib.request.urlopen(stats_url, timeout=10).read()))["batch_statuses"] != {
                "completed": 1} and time.monotonic() < deadline:
            time.sleep(0.1)
        batch = run(litellm.aretrieve_batch(batch_id=created.id, **kwargs(server)))
        usage = next(iter(run(file_lines(server, batch.output_file_id)).values()))["response"]["body"]["usage"]
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert first["requests"] == 0  # not answered before its turnaround
    assert batch.completed_at - batch.created_at >= 0 and stats["requests"] == 1
    expected = 0.25 * (usage["prompt_tokens"] * 2 + usage["completion_tokens"] * 8) / 1e6
    assert stats["billed_batch_usd"] == pytest.approx(expected) and stats["billed_usd"] == pytest.approx(expected)
    bad = subprocess.run([sys.executable, "-m", "tests.support.judge_server", "--batch-discount", "0"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--batch-discount: expected a fraction in (0, 1], got 0" in bad.stderr
