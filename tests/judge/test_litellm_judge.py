"""LiteLLMJudge over real HTTP against the local judge server (no mocks of litellm)."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
import time
import traceback

import pytest

from judgeflow.errors import JudgeflowError, PermanentJudgeError, TransientJudgeError
from judgeflow.judge.base import Judge, JudgeReply, JudgeRequest
from judgeflow.judge.litellm_judge import LiteLLMJudge, completion_cost_usd
from judgeflow.judge.retry import RETRY_AFTER_MAX_S, CallRetry, Pace, backoff_delay, retry_delay
from judgeflow.judge.send_gate import Call
from judgeflow.metrics.data_block import render_data_block
from judgeflow.metrics.hallucination.schema import HallucinationJudgement
from judgeflow.metrics.toxicity.schema import Opinions
from tests.support.judge_server import JudgeServer, Reply, context_window_reply, error_reply

API_KEY = "test-key-s3cr3t-0123456789"
MODEL = "openai/judge-test"


def opinions_request(output: str = "I think cats rule. Fact: water is wet.") -> JudgeRequest:
    fields = {"input": "hi", "output": output}
    return JudgeRequest(
        step="toxicity.opinions",
        messages=[
            {"role": "system", "content": "Extract the author's opinions."},
            {"role": "user", "content": "Data:\n" + render_data_block(fields)},
        ],
        response_format=Opinions,
        fields=fields,
    )


@pytest.fixture
def server():
    with JudgeServer() as srv:
        yield srv


@pytest.fixture(params=["litellm-http-handler", "openai-sdk"])
def http_path(request, monkeypatch):
    """The adapter's default (litellm's own HTTP handler for OpenAI models) and
    the OpenAI SDK path a user gets back with the switch set to false: replies,
    errors and Retry-After must reach the adapter the same way on both."""
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER",
                       "true" if request.param == "litellm-http-handler" else "false")
    return request.param


both_http_paths = pytest.mark.usefixtures("http_path")


def make_judge(server: JudgeServer, *, max_retries: int = 2, backoff_base_s: float = 0.01,
               backoff_max_s: float = 0.05, **kwargs) -> LiteLLMJudge:
    opts = dict(api_base=server.url, api_key=API_KEY, timeout_s=5,
                retry=CallRetry(max_retries=max_retries, backoff_base_s=backoff_base_s, backoff_max_s=backoff_max_s))
    opts.update(kwargs)
    return LiteLLMJudge(MODEL, **opts)


# --------------------------------------------------------------------------
# import
# --------------------------------------------------------------------------


def test_import_sets_local_cost_map_and_makes_no_network_call():
    code = (
        "import os, socket\n"
        "hits = []\n"
        "def blocked(*a, **k):\n"
        "    hits.append(a)\n"
        "    raise OSError('network blocked in test')\n"
        "socket.getaddrinfo = blocked\n"
        "socket.create_connection = blocked\n"
        "socket.socket.connect = blocked\n"
        "import judgeflow.judge.litellm_judge as m\n"
        "assert os.environ['LITELLM_LOCAL_MODEL_COST_MAP'] == 'True'\n"
        "assert 'gpt-4o' in m.litellm.model_cost, 'price map not loaded'\n"
        "assert not hits, hits\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    # no wall-clock bound: a busy machine stretches the import; any attempt at the
    # network (the remote price map) is recorded in `hits` instead
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def test_is_a_judge():
    judge = LiteLLMJudge(MODEL, api_key=API_KEY)
    assert isinstance(judge, Judge)
    assert judge.model == MODEL
    assert API_KEY not in repr(judge)


# --------------------------------------------------------------------------
# pure helpers
# --------------------------------------------------------------------------


def test_full_jitter_backoff_bounds():
    rng = random.Random(1)
    for attempt in range(8):
        ceiling = min(30.0, 1.0 * 2**attempt)
        draws = [backoff_delay(attempt, 1.0, 30.0, rng) for _ in range(400)]
        assert all(0.0 <= d <= ceiling for d in draws)
        # full jitter: spread over the whole [0, ceiling] range, not bunched near the top
        assert min(draws) < 0.1 * ceiling and max(draws) > 0.9 * ceiling
    assert backoff_delay(1000, 1.0, 30.0, rng) <= 30.0
    assert backoff_delay(3, 0.0, 30.0, rng) == 0.0


def test_retry_after_is_a_floor_and_may_exceed_backoff_max():
    rng = random.Random(2)
    assert all(retry_delay(0, 1.0, 30.0, 2.5, rng) >= 2.5 for _ in range(100))
    assert retry_delay(0, 0.01, 0.05, 45.0, rng) == 45.0  # honoured beyond backoff_max_s


def test_cost_helper_prices_a_known_model_without_network():
    from litellm import ModelResponse
    from litellm.types.utils import Usage

    response = ModelResponse(
        model="gpt-4o",
        choices=[{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
        usage=Usage(prompt_tokens=1000, completion_tokens=100, total_tokens=1100),
    )
    cost = completion_cost_usd(response)
    assert isinstance(cost, float) and cost > 0
    response.model = "judge-test-unpriced"
    assert completion_cost_usd(response) is None
    assert completion_cost_usd(object()) is None


# --------------------------------------------------------------------------
# over HTTP
# --------------------------------------------------------------------------


@both_http_paths
def test_success_reply_tokens_cost_latency(server):
    judge = make_judge(server)
    reply = judge.complete(opinions_request())
    assert isinstance(reply, JudgeReply)
    assert Opinions.model_validate_json(reply.content).opinions == ["I think cats rule"]
    assert reply.model == MODEL
    assert reply.prompt_tokens and reply.prompt_tokens > 0
    assert reply.completion_tokens and reply.completion_tokens > 0
    assert reply.cost_usd is None  # unpriced test model
    assert 0 < reply.latency_s < 60  # seconds, not milliseconds (loose: a busy machine stretches it)
    sent = server.requests[0]
    assert server.calls() == 1
    assert sent.step == "Opinions"
    assert sent.raw["response_format"]["type"] == "json_schema"
    assert sent.raw["response_format"]["json_schema"]["name"] == "Opinions"
    assert sent.raw["temperature"] == 0
    assert {k.lower(): v for k, v in sent.headers.items()}["authorization"] == f"Bearer {API_KEY}"
    assert sent.data == {"input": "hi", "output": "I think cats rule. Fact: water is wet."}


def test_null_content_is_an_empty_string(server):
    server.script(Reply(content=None))
    assert make_judge(server).complete(opinions_request()).content == ""


@both_http_paths
def test_garbage_content_is_returned_verbatim(server):
    server.script(Reply(content="Sure! Here's my analysis..."))
    assert make_judge(server).complete(opinions_request()).content == "Sure! Here's my analysis..."


@both_http_paths
def test_429_retry_after_is_honoured_then_success(server):
    server.script(error_reply(429, "Rate limit reached", headers={"Retry-After": "2"}))
    judge = make_judge(server, backoff_base_s=0.01, backoff_max_s=0.02)
    started = time.monotonic()
    reply = judge.complete(opinions_request())
    elapsed = time.monotonic() - started
    assert server.calls() == 2
    assert elapsed >= 2.0
    gap = server.requests[1].received_at - server.requests[0].received_at
    assert gap >= 2.0
    # the successful attempt only: it was sent 2 s after the 429 came back, so its latency is at
    # most what is left of the call after that; one that included the wait would be 2 s more
    assert reply.latency_s <= started + elapsed - server.requests[0].received_at - 2.0


def test_500_then_success_makes_exactly_two_requests(server):
    server.script(error_reply(500, "boom"))
    make_judge(server).complete(opinions_request())
    assert server.calls() == 2  # no hidden retries inside litellm or the OpenAI client


@both_http_paths
def test_persistent_500_gives_up_after_one_plus_max_retries(server):
    server.responder = lambda req: error_reply(500, "boom")
    judge = make_judge(server, max_retries=3)
    with pytest.raises(TransientJudgeError) as info:
        judge.complete(opinions_request())
    assert server.calls() == 4
    assert "500" in str(info.value) and "4 attempts" in str(info.value)
    assert info.value.retry_after_s is None


@both_http_paths
def test_persistent_429_carries_retry_after(server):
    server.responder = lambda req: error_reply(429, "slow down", headers={"Retry-After": "0.1"})
    with pytest.raises(TransientJudgeError) as info:
        make_judge(server, max_retries=1).complete(opinions_request())
    assert server.calls() == 2
    assert info.value.retry_after_s == pytest.approx(0.1)


def test_retry_after_beyond_cap_gives_up_at_once(server):
    big = str(int(RETRY_AFTER_MAX_S * 10))
    server.script(error_reply(429, "come back tomorrow", headers={"Retry-After": big}))
    started = time.monotonic()
    with pytest.raises(TransientJudgeError) as info:
        make_judge(server).complete(opinions_request())
    assert time.monotonic() - started < RETRY_AFTER_MAX_S  # it did not wait the (capped) Retry-After
    assert server.calls() == 1
    assert info.value.retry_after_s == float(big)


@both_http_paths
def test_503_and_malformed_200_are_transient(server):
    server.script(error_reply(503, "overloaded"), Reply(status=200, body="<html>not json</html>"))
    reply = make_judge(server).complete(opinions_request())
    assert server.calls() == 3
    assert reply.content


@both_http_paths
@pytest.mark.parametrize(
    "reply, needle",
    [
        (error_reply(400, "Invalid schema for response_format"), "HTTP 400"),
        (error_reply(401, f"Incorrect API key provided: {API_KEY}", code="invalid_api_key"), "HTTP 401"),
        (error_reply(403, f"Key {API_KEY} has no access to model"), "HTTP 403"),
        (error_reply(404, "The model `judge-test` does not exist"), "HTTP 404"),
        (context_window_reply(), "context window"),
        (error_reply(400, "Your request was rejected by our safety system",
                     code="content_policy_violation"), "content policy"),
    ],
    ids=["400", "401", "403", "404", "context-window", "content-policy"],
)
def test_permanent_errors_after_exactly_one_request(server, reply, needle):
    server.responder = lambda req: reply
    with pytest.raises(PermanentJudgeError) as info:
        make_judge(server).complete(opinions_request())
    assert server.calls() == 1
    assert needle in str(info.value)
    rendered = "".join(traceback.format_exception(info.value))
    assert API_KEY not in rendered
    assert API_KEY not in repr(info.value)


@both_http_paths
def test_api_key_is_scrubbed_from_transient_messages(server):
    server.responder = lambda req: error_reply(500, f"upstream said Bearer {API_KEY} and sk-abcdef123456789")
    with pytest.raises(TransientJudgeError) as info:
        make_judge(server, max_retries=0).complete(opinions_request())
    rendered = "".join(traceback.format_exception(info.value))
    assert API_KEY not in rendered and "sk-abcdef123456789" not in rendered


@both_http_paths
def test_stall_beyond_timeout_is_retried_then_transient(server):
    server.responder = lambda req: Reply(content='{"opinions": []}', delay_s=20.0)
    judge = make_judge(server, timeout_s=0.4, max_retries=1)
    started = time.monotonic()
    with pytest.raises(TransientJudgeError) as info:
        judge.complete(opinions_request())
    assert server.calls() == 2
    assert "timed out" in str(info.value)
    # gave up long before the stalled reply would have come (bounds loose for a busy machine)
    assert server.requests[1].received_at - server.requests[0].received_at < 15
    assert time.monotonic() - started < 15


@both_http_paths
def test_connection_refused_is_transient():
    judge = LiteLLMJudge(MODEL, api_base="http://127.0.0.1:9/v1", api_key=API_KEY, timeout_s=2,
                         retry=CallRetry(max_retries=1, backoff_base_s=0.01, backoff_max_s=0.01))
    with pytest.raises(TransientJudgeError) as info:
        judge.complete(opinions_request())
    # no server answered: the message says so, and names no HTTP status it never got
    assert "could not connect" in str(info.value) and "HTTP" not in str(info.value), str(info.value)
    assert info.value.status_code is None


def test_injected_sleep_sees_full_jitter_delays(server):
    server.responder = lambda req: error_reply(500, "boom")
    slept: list[float] = []
    async def no_sleep(delay: float) -> None:
        slept.append(delay)

    judge = make_judge(server, max_retries=4, backoff_base_s=1.0, backoff_max_s=3.0,
                       pace=Pace(random.Random(3), no_sleep))
    with pytest.raises(TransientJudgeError):
        judge.complete(opinions_request())
    assert len(slept) == 4 and server.calls() == 5
    for attempt, delay in enumerate(slept):
        assert 0.0 <= delay <= min(3.0, 2**attempt)


def test_concurrency_bound(server):
    """Twelve calls from threads, three slots: with the judge's replies held, exactly
    three are on the wire and nine wait for a slot; let go, all twelve are answered,
    never more than three at once."""
    server.hold()
    judge = make_judge(server, max_concurrency=3)
    errors: list[BaseException] = []

    def call():
        try:
            judge.complete(opinions_request())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    server.wait_until(lambda s: s.held == 3, "three calls on the wire")
    _eventually(lambda: judge._slots._waiting == 9, "nine calls waiting for a slot")
    assert server.in_flight == 3 and server.calls() == 3
    server.release()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    assert server.calls() == 12
    assert server.max_in_flight == 3


async def test_acomplete_success(server):
    judge = make_judge(server)
    fields = {"input": "q", "output": "It is raining [halluc=0.75]", "context": ["sunny"], "examples": []}
    request = JudgeRequest(
        step="hallucination",
        messages=[{"role": "user", "content": render_data_block(fields)}],
        response_format=HallucinationJudgement,
        fields=fields,
    )
    reply = await judge.acomplete(request)
    assert HallucinationJudgement.model_validate_json(reply.content).score == 0.75
    assert server.requests[0].step == "HallucinationJudgement"


@both_http_paths
async def test_acomplete_retries_and_respects_the_bound(server):
    server.latency_mean_s = 0.2
    server.script(error_reply(500, "boom"))
    judge = make_judge(server, max_concurrency=2)
    replies = await asyncio.gather(*(judge.acomplete(opinions_request()) for _ in range(5)))
    assert len(replies) == 5
    assert server.calls() == 6
    assert server.max_in_flight <= 2


async def test_the_bound_holds_only_on_the_wire_on_the_default_path(server, monkeypatch):
    """Calls handed over beyond the bound wait prepared: the judge sees
    exactly max_concurrency at once, and a call's latency is its own wire
    time, not its wait for a slot."""
    judge = make_judge(server, max_concurrency=2)
    replies = await _two_held_then_four(server, judge)
    assert server.calls() == 6 and server.max_in_flight == 2
    assert len(judge._wire_clients) == 1  # litellm was given the slot-holding client
    assert judge._slots.acquire(blocking=False) and judge._slots.acquire(blocking=False)


async def _until(predicate, what: str, timeout_s: float = 120.0) -> None:
    """Poll ``predicate`` on the running loop (other tasks progress meanwhile); fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def _eventually(predicate, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


async def _two_held_then_four(server, judge) -> list:
    """Six calls, two slots: the first two held on the wire by the judge until four
    wait for a slot and at least 0.3 s passed; then every reply let go. Checks that a
    call's latency holds its own time on the wire, not its wait for a slot: the two held
    ones at least their hold, and the four that waited at most the time from the
    release to their end (their wait ended after it)."""
    server.hold()
    ended: dict[int, float] = {}

    async def call(i: int):
        reply = await judge.acomplete(opinions_request(f"I think call {i} is fine."))
        ended[i] = time.monotonic()
        return reply

    tasks = [asyncio.ensure_future(call(i)) for i in range(6)]
    await _until(lambda: server.held == 2, "two calls on the wire")
    await _until(lambda: judge._slots._waiting == 4, "four calls waiting for a slot")
    held_from = max(req.received_at for req in server.requests)
    await asyncio.sleep(0.3)  # the held calls' time on the wire, at least (any length: bounds are measured)
    assert server.calls() == 2 and server.in_flight == 2
    released = time.monotonic()
    server.release()
    replies = await asyncio.gather(*tasks)
    sent = {req.data["output"]: req for req in server.requests}
    first_two = [i for i in range(6) if sent[f"I think call {i} is fine."].received_at <= held_from]
    assert len(first_two) == 2
    for i, reply in enumerate(replies):
        if i in first_two:
            assert reply.latency_s >= released - held_from, (i, reply.latency_s)
        else:
            assert 0 < reply.latency_s <= ended[i] - released, (i, reply.latency_s, ended[i] - released)
    return replies


@both_http_paths
async def test_calls_waiting_for_a_slot_go_in_their_priority_order(server):
    """The priority of the Call a caller hands in decides which waiting call a
    freed slot goes to (tasks/scoring.py gives one per pair), on either HTTP path."""
    server.hold()
    judge = make_judge(server, max_concurrency=1)

    async def call(name: str, priority: tuple) -> None:
        await judge.acomplete(opinions_request(f"I think {name} is best."), Call(priority=priority))

    first = asyncio.create_task(call("first", ()))
    await _until(lambda: server.held == 1, "the first call to hold the only slot on the wire")
    waiting = [asyncio.create_task(call(f"p{rank}", (rank,))) for rank in (4, 2, 5, 1, 3)]
    await _until(lambda: judge._slots._waiting == 5, "five calls waiting for the slot")
    server.release()
    await asyncio.gather(first, *waiting)

    sent = [req.data["output"] for req in server.requests]
    assert sent == [f"I think {name} is best." for name in ("first", "p1", "p2", "p3", "p4", "p5")], sent


async def test_the_sdk_path_holds_the_slot_around_the_whole_call(server, monkeypatch):
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "false")
    judge = make_judge(server, max_concurrency=2)
    await _two_held_then_four(server, judge)
    assert server.calls() == 6 and server.max_in_flight == 2
    assert len(judge._wire_clients) == 0  # litellm builds the SDK's client itself


@both_http_paths
async def test_warm_up_sends_nothing_to_the_judge_and_the_next_call_is_real(server):
    judge = make_judge(server)
    assert await judge.warm_up() is True
    assert server.calls() == 0  # a canned reply: no request left the process, nothing was spent
    reply = await judge.acomplete(opinions_request())
    assert server.calls() == 1 and Opinions.model_validate_json(reply.content).opinions


async def test_a_warm_up_litellm_refuses_returns_false_and_raises_nothing(server):
    judge = LiteLLMJudge("no-such-provider/model", api_base=server.url, api_key=API_KEY)
    assert await judge.warm_up() is False
    assert server.calls() == 0


@both_http_paths
async def test_acomplete_translates_errors(server):
    server.script(error_reply(401, f"bad key {API_KEY}"))
    with pytest.raises(PermanentJudgeError) as info:
        await make_judge(server).acomplete(opinions_request())
    assert API_KEY not in "".join(traceback.format_exception(info.value))


def test_sync_then_async_across_event_loops(server):
    judge = make_judge(server)
    judge.complete(opinions_request())
    for _ in range(2):  # litellm 1.106 keys its async clients on the event loop
        asyncio.run(judge.acomplete(opinions_request()))
    assert server.calls() == 3


def test_errors_are_judgeflow_errors(server):
    server.responder = lambda req: error_reply(418, "teapot")
    with pytest.raises(JudgeflowError):
        make_judge(server).complete(opinions_request())


def test_retry_after_starts_a_cooldown_shared_by_other_calls(server):
    judge = make_judge(server, max_retries=0)
    server.script(error_reply(429, "slow down", headers={"Retry-After": "0.5"}))
    with pytest.raises(TransientJudgeError):
        judge.complete(opinions_request())
    judge.complete(opinions_request())  # a different call waits out the cool-down first
    assert server.requests[1].received_at - server.requests[0].received_at >= 0.5


@both_http_paths
async def test_cancelled_async_calls_do_not_leak_slots(server):
    server.hold()
    judge = make_judge(server, max_concurrency=1)
    running = asyncio.create_task(judge.acomplete(opinions_request()))
    await _until(lambda: server.held == 1, "the first call on the wire")
    waiting = asyncio.create_task(judge.acomplete(opinions_request()))
    await _until(lambda: judge._slots._waiting == 1, "the second call waiting for the slot")
    waiting.cancel()  # cancelled while waiting for the slot
    with pytest.raises(asyncio.CancelledError):
        await waiting
    in_flight = asyncio.create_task(judge.acomplete(opinions_request()))
    await _until(lambda: judge._slots._waiting == 1, "the third call waiting for the slot")
    server.release(1)
    await running
    await _until(lambda: server.held == 1, "the third call on the wire")
    in_flight.cancel()  # cancelled during the HTTP call
    with pytest.raises(asyncio.CancelledError):
        await in_flight
    server.release()
    assert judge._slots.acquire(blocking=False)  # the one slot is free again
    judge._slots.release()


def test_the_factory_builds_the_configured_judge(server):
    from judgeflow.judge.factory import build_judge, judge_config
    from judgeflow.config.settings import Settings

    settings = Settings(judge_model=MODEL, judge_api_base=server.url, judge_api_key=API_KEY,
                        judge_timeout_s=5, judge_max_retries=1, max_concurrency=3, judge_processes=1)
    judge = build_judge(judge_config(settings))
    try:
        assert isinstance(judge, LiteLLMJudge)
        assert judge.model == MODEL and judge.max_concurrency == 3 and judge.retry.max_retries == 1
        assert Opinions.model_validate_json(judge.complete(opinions_request()).content)
        assert {k.lower(): v for k, v in server.requests[0].headers.items()}["authorization"] == f"Bearer {API_KEY}"
    finally:
        judge.close()


def test_the_judge_config_carries_the_judges_key_and_no_other_secret():
    import pickle

    from judgeflow.judge.config import JudgeConfig
    from judgeflow.config.settings import Settings

    settings = Settings(_env_file=None, judge_model=MODEL, judge_api_key="judge-key-0123456789",
                        database_url="postgresql://u:db-secret-pw@127.0.0.1/x", phoenix_api_key="phx-key-0123456789",
                        judge_processes=2, max_concurrency=6)
    config = JudgeConfig.from_settings(settings)
    wire = pickle.dumps(config)
    assert b"judge-key-0123456789" in wire
    assert b"db-secret-pw" not in wire and b"phx-key-0123456789" not in wire
    assert "judge-key" not in repr(config)
    # the run's bound split over its workers, in one place
    assert [c.max_concurrency for c in config.shares()] == [3, 3]
    assert [c.max_concurrency for c in JudgeConfig(MODEL, max_concurrency=6, processes=4).shares()] == [2, 2, 1, 1]
    assert [c.max_concurrency for c in JudgeConfig(MODEL, max_concurrency=3, processes=4).shares()] == [1, 1, 1]


@pytest.mark.parametrize("model", ["offline", "offline/classifier"])
def test_factory_offline(model):
    pytest.importorskip("judgeflow.judge.offline")
    from judgeflow.judge.factory import build_judge, judge_config
    from judgeflow.judge.offline import OfflineJudge
    from judgeflow.config.settings import Settings

    assert isinstance(build_judge(judge_config(Settings(judge_model=model))), OfflineJudge)


# --------------------------------------------------------------------------
# the metrics over HTTP: text as written, verdict case, blank context
# --------------------------------------------------------------------------

WORLD_OUTPUT = "Ты идиот [toxic]. 这个计划不错! אתה טיפש לגמרי [toxic]? Great demo 🎉👍🏽"


def test_toxicity_sends_every_language_as_written(server):
    from judgeflow.metrics import ToxicityMetric

    result = ToxicityMetric(make_judge(server), strict_mode=True).score("Как дела? 你好", WORLD_OUTPUT)
    opinions = ["Ты идиот [toxic]", "这个计划不错", "אתה טיפש לגמרי [toxic]", "Great demo 🎉👍🏽"]
    assert result.details["opinions"] == opinions
    assert [row["verdict"] for row in result.details["verdicts"]] == ["yes", "no", "yes", "no"]
    assert result.score == 1.0
    steps = [request.step for request in server.requests]
    assert steps == ["Opinions", "Verdicts", "ToxicityReason"]
    for request in server.requests:
        user = request.messages[-1]["content"]
        assert "\\u" not in user  # no escape codes reached the judge
    assert WORLD_OUTPUT in server.requests[0].messages[-1]["content"]
    assert server.requests[1].data == {"opinion_count": 4, "opinions": opinions}
    # strict mode: the reason step is told the rule and gets exact counts
    reason = server.requests[2]
    assert "at least one of the author's opinions was judged toxic" in reason.messages[0]["content"]
    assert (reason.data["score"], reason.data["toxic_count"], reason.data["opinion_count"]) == (1.0, 2, 4)
    assert result.reason == "The score is 1.0 because 2 of the opinions were judged toxic."


def test_verdict_in_another_case_costs_no_repair_call(server):
    from tests.support.judge_server import json_reply

    from judgeflow.metrics import ToxicityMetric

    server.script(
        json_reply({"opinions": ["you are an idiot", "nice plan"]}),
        json_reply({"verdicts": [{"verdict": "YES", "reason": "insult"}, {"verdict": "No", "reason": "fine"}]}),
    )
    result = ToxicityMetric(make_judge(server), include_reason=False).score("q", "a")
    assert [row["verdict"] for row in result.details["verdicts"]] == ["yes", "no"]
    assert result.score == 0.5 and result.judge_calls == 2 and server.calls("Verdicts") == 1


def test_hallucination_drops_blank_context_and_sends_text_as_written(server):
    from judgeflow.metrics import HallucinationMetric

    judge = make_judge(server)
    result = HallucinationMetric(judge).score("東京は？", "東京は日本の首都です [halluc=0.25]", ["  ", "東京は日本の首都。", ""])
    assert result.score == 0.25 and result.details["context_blank_dropped"] == 2
    assert server.requests[-1].data["context"] == ["東京は日本の首都。"]
    assert "東京は日本の首都。" in server.requests[-1].messages[-1]["content"]

    blank = HallucinationMetric(judge).score("q", "Paris is in France.", [" ", ""])
    assert blank.details["context_used"] is False
    assert "context" not in server.requests[-1].data


def test_a_judge_called_from_two_live_loops_leaves_no_pending_task_logged(server, caplog):
    """litellm drops its logging worker's task on the old loop when it is
    called from a new one; the test suite filters asyncio's message about that
    one task (tests/conftest.py), so collecting it logs nothing after the suite."""
    import gc
    import logging

    judge = make_judge(server)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        first = asyncio.run_coroutine_threadsafe(judge.acomplete(opinions_request()), loop).result(timeout=30)
        second = asyncio.run(judge.acomplete(opinions_request()))  # another loop, while the first still runs
        assert first.content and second.content
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            gc.collect()
        assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()
