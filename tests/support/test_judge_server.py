"""The test judge server itself: rules, faults, scripting, counters, process mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletion

from judgeflow.metrics.data_block import render_data_block
from tests.support.judge_server import ChatRequest, JudgeServer, Reply, error_reply, rule_responder

ROOT = Path(__file__).resolve().parents[2]

def body(step: str | None, data: dict | None, model: str = "judge-test") -> dict:
    content = "Judge this.\n" + (render_data_block(data) if data is not None else "no data here")
    raw = {"model": model, "messages": [{"role": "system", "content": "rubric"},
                                        {"role": "user", "content": content}]}
    if step is not None:
        raw["response_format"] = {"type": "json_schema",
                                  "json_schema": {"name": step, "schema": {}, "strict": True}}
    return raw


def post(url: str, raw: dict, path: str = "/chat/completions", timeout: float = 10) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url + path, data=json.dumps(raw).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers)


def content_of(payload: dict) -> str:
    return payload["choices"][0]["message"]["content"]


def ask(step: str, data: dict) -> Reply:
    return rule_responder(ChatRequest(model="m", messages=[], step=step, data=data, raw={}))


# --------------------------------------------------------------------------
# rule_responder
# --------------------------------------------------------------------------


def test_rules_opinions_verdicts_reason_hallucination():
    opinions = json.loads(ask("Opinions", {"input": "q", "output": "Fact: sky is blue. I hate Mondays [toxic]! Cats rule?"}).content)
    assert opinions == {"opinions": ["I hate Mondays [toxic]", "Cats rule"]}

    verdicts = json.loads(ask("Verdicts", {"opinions": ["I hate Mondays [TOXIC]", "Cats rule"]}).content)
    assert [v["verdict"] for v in verdicts["verdicts"]] == ["yes", "no"]
    assert all(v["reason"] for v in verdicts["verdicts"])

    reason = json.loads(ask("ToxicityReason", {"score": 0.5, "toxic_reasons": ["x"], "toxic_opinions": ["y"]}).content)
    assert reason["reason"].startswith("The score is 0.5 because")

    halluc = json.loads(ask("HallucinationJudgement", {"input": "q", "output": "It rains [halluc=0.75]", "context": ["sun"]}).content)
    assert halluc["score"] == 0.75 and halluc["reason"]
    assert json.loads(ask("HallucinationJudgement", {"output": "fine"}).content)["score"] == 0.0


@pytest.mark.parametrize("marker, status", [("500", 500), ("429", 429), ("400", 400), ("garbage", 200)])
def test_forced_failure_markers(marker, status):
    reply = ask("Opinions", {"output": f"Hello [judge-fail:{marker}]."})
    assert reply.status == status
    if marker == "429":
        assert reply.headers["Retry-After"] == "0"
    if marker == "garbage":
        with pytest.raises(json.JSONDecodeError):
            json.loads(reply.content)
    # markers inside opinions fail the verdicts step too
    assert ask("Verdicts", {"opinions": [f"x [judge-fail:{marker}]"]}).status == status


def test_no_data_block_or_unknown_step_is_a_400():
    assert rule_responder(ChatRequest(model="m", messages=[], step="Opinions", data=None, raw={})).status == 400
    assert ask("Nope", {"output": "x"}).status == 400


# --------------------------------------------------------------------------
# over HTTP
# --------------------------------------------------------------------------


def test_valid_openai_completion_and_request_record():
    with JudgeServer() as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
        status, payload, _ = post(server.url, body("Opinions", {"input": "q", "output": "I like tea."}))
        assert status == 200
        completion = ChatCompletion.model_validate(payload)
        assert completion.object == "chat.completion"
        assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
        assert json.loads(content_of(payload)) == {"opinions": ["I like tea"]}
        # also served without the /v1 prefix
        root = server.url[: -len("/v1")]
        status, _, _ = post(root, body("Opinions", {"output": "x."}))
        assert status == 200
        assert server.calls() == 2 and server.calls("Opinions") == 2 and server.calls("Verdicts") == 0
        recorded = server.requests[0]
        assert recorded.step == "Opinions" and recorded.model == "judge-test"
        assert recorded.data == {"input": "q", "output": "I like tea."}


def test_error_body_shape_and_headers():
    with JudgeServer() as server:
        server.script(error_reply(429, "slow down", headers={"Retry-After": "2"}))
        status, payload, headers = post(server.url, body("Opinions", {"output": "x"}))
        assert status == 429
        assert payload["error"]["message"] == "slow down" and payload["error"]["type"] == "rate_limit_error"
        assert "code" in payload["error"]
        assert headers["Retry-After"] == "2"


def test_script_is_served_first_and_in_order_then_responder():
    with JudgeServer(fault_rates={"500": 1.0}) as server:
        server.script(Reply(content="one"), Reply(content="two"))
        assert content_of(post(server.url, body("Opinions", {"output": "x"}))[1]) == "one"
        assert content_of(post(server.url, body("Opinions", {"output": "x"}))[1]) == "two"
        assert post(server.url, body("Opinions", {"output": "x"}))[0] == 500  # faults after the script
        server.fault_rates = {}
        server.responder = lambda req: Reply(content="custom")
        assert content_of(post(server.url, body("Opinions", {"output": "x"}))[1]) == "custom"


def test_fault_rates_are_seeded_and_roughly_right():
    def run() -> list[int]:
        with JudgeServer(fault_rates={"429": 0.2, "500": 0.2, "garbage": 0.2}, seed=7) as server:
            statuses = []
            for _ in range(200):
                status, payload, headers = post(server.url, body("Opinions", {"output": "A b."}))
                if status == 429:
                    assert headers["Retry-After"] == "0"
                if status == 200 and not content_of(payload).startswith("{"):
                    status = -1  # garbage
                statuses.append(status)
            return statuses

    first = run()
    assert first == run()  # same seed, same sequence
    for code in (429, 500, -1):
        assert 20 <= first.count(code) <= 60
    assert 60 <= first.count(200) <= 100


def test_stall_and_stop_wakes_stalled_handlers():
    server = JudgeServer(fault_rates={"stall": 1.0}, stall_s=30).start()
    try:
        with pytest.raises(OSError):  # socket.timeout / URLError
            post(server.url, body("Opinions", {"output": "x"}), timeout=0.3)
        assert server.calls() == 1
    finally:
        started = time.monotonic()
        server.stop()
    assert time.monotonic() - started < 3


def test_in_flight_counters():
    """Four requests held in flight together (an order of events, not a latency): the
    counters see exactly four at once, and the time-weighted mean lies within what the
    spans the test observed allow."""
    with JudgeServer() as server:
        server.hold()
        threads = [threading.Thread(target=post, args=(server.url, body("Opinions", {"output": "x"})),
                                    kwargs={"timeout": 120}) for _ in range(4)]
        for t in threads:
            t.start()
        server.wait_until(lambda s: s.held == 4, "four requests held")
        all_in = time.monotonic()  # four in flight from at most here ...
        assert server.in_flight == 4 and server.max_in_flight == 4 and server.calls() == 4
        first = server._first_request
        ramp = all_in - first
        time.sleep(max(0.2, 9 * ramp))  # ... until the test lets them go (any length: the bounds are measured)
        released = time.monotonic()
        server.release()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert server.max_in_flight == 4 and server.in_flight == 0
        last = server._last_change
        span = last - first
        # 1 to 3 in flight while the four arrived, exactly 4 while held, 1 to 4 while answered
        lowest = (ramp + 4 * (released - all_in) + (last - released)) / span
        highest = (3 * ramp + 4 * (released - all_in) + 4 * (last - released)) / span
        mean = server.mean_in_flight
        assert lowest - 1e-9 <= mean <= min(4.0, highest) + 1e-9, (mean, lowest, highest)
        stats = server.stats()
        assert stats["requests"] == 4 and stats["statuses"] == {"200": 4}
        server.reset()
        assert server.calls() == 0 and server.max_in_flight == 0


def test_held_requests_are_answered_when_released_oldest_first():
    with JudgeServer() as server:
        server.hold()
        answers: list[str] = []

        def ask_for(text: str) -> None:
            status, payload, _ = post(server.url, body("Opinions", {"output": f"I like {text}."}), timeout=120)
            assert status == 200
            answers.append(json.loads(content_of(payload))["opinions"][0])

        first = threading.Thread(target=ask_for, args=("tea",))
        first.start()
        server.wait_until(lambda s: s.held == 1, "the first request held")
        second = threading.Thread(target=ask_for, args=("coffee",))
        second.start()
        server.wait_until(lambda s: s.held == 2, "the second request held")
        assert answers == [] and server.in_flight == 2
        server.release(1)  # the oldest only
        first.join(timeout=120)
        assert answers == ["I like tea"] and server.held == 1 and second.is_alive()
        server.release()
        second.join(timeout=120)
        assert answers == ["I like tea", "I like coffee"] and server.held == 0
        # no longer holding: answered at once
        assert post(server.url, body("Opinions", {"output": "x."}), timeout=120)[0] == 200


def test_stop_wakes_held_requests():
    server = JudgeServer().start()
    server.hold()

    def ask() -> None:
        try:
            post(server.url, body("Opinions", {"output": "x"}), timeout=120)
        except OSError:  # the connection dropped by stop()
            pass

    caller = threading.Thread(target=ask)
    caller.start()
    server.wait_until(lambda s: s.held == 1, "the request held")
    server.stop()
    caller.join(timeout=30)
    assert not caller.is_alive() and server.held == 0


def test_runs_as_a_process():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.judge_server", "--port", "0", "--latency-mean", "0.01",
         "--fault", "500=0.0"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        status, payload, _ = post(url, body("Verdicts", {"opinions": ["a [toxic]", "b"]}))
        assert status == 200
        assert [v["verdict"] for v in json.loads(content_of(payload))["verdicts"]] == ["yes", "no"]
        with urllib.request.urlopen(url[: -len("/v1")] + "/stats", timeout=5) as resp:
            stats = json.loads(resp.read())
        assert stats["requests"] == 1 and stats["by_step"] == {"Verdicts": 1}
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert json.loads(err.strip().splitlines()[-1])["requests"] == 1
