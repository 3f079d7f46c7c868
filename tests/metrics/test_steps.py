"""The shared step machinery: reply parsing, the repair loop and the driver."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from judgeflow.metrics.hallucination.schema import HallucinationJudgement
from judgeflow.metrics.steps import Usage, adrive, ask, describe_error, parse_reply
from judgeflow.metrics.toxicity.schema import Opinions, Verdicts
from pydantic import ValidationError

from judgeflow.errors import InvalidJudgeReplyError, JudgeAbstained, TransientJudgeError
from judgeflow.judge.base import JudgeReply, JudgeRequest
from tests.metrics.fakes import ScriptedJudge, hallucination_reply, opinions_reply, verdicts_reply


def drive(flow, judge, *, usage: Usage, concurrent: bool = True):
    """:func:`adrive` on an event loop of its own."""
    return asyncio.run(adrive(flow, judge, usage=usage, concurrent=concurrent))


def request(step: str = "test.step", text: str = "question") -> JudgeRequest:
    return JudgeRequest(
        step=step,
        messages=[{"role": "system", "content": "rules"}, {"role": "user", "content": text}],
        response_format=Opinions,
        fields={"text": text},
    )


# --- parse_reply on raw strings -------------------------------------------------


def test_parse_valid_reply() -> None:
    assert parse_reply('{"opinions": ["a", "b"]}', Opinions).opinions == ["a", "b"]


def test_parse_reply_in_code_fence() -> None:
    raw = '```json\n{"score": 0.2, "reason": ["ok"]}\n```'
    assert parse_reply(raw, HallucinationJudgement).score == 0.2


@pytest.mark.parametrize(
    ("raw", "schema", "context", "fragment"),
    [
        ("Sure! The opinions are: none", Opinions, None, "Invalid JSON"),
        ('{"opinions": "just one"}', Opinions, None, "opinions"),
        ('{"opinion": []}', Opinions, None, "opinions"),
        ('{"score": 1.5, "reason": []}', HallucinationJudgement, None, "score"),
        ('{"score": -0.1, "reason": []}', HallucinationJudgement, None, "score"),
        ('{"verdicts": [{"verdict": "maybe", "reason": "r"}]}', Verdicts, {"expected": 1}, "verdict"),
        (verdicts_reply("yes", "no"), Verdicts, {"expected": 3}, "expected 3 verdicts"),
    ],
    ids=["not-json", "wrong-type", "wrong-field", "score-high", "score-negative", "verdict-maybe", "count"],
)
def test_parse_invalid_replies(raw: str, schema: type, context: dict | None, fragment: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_reply(raw, schema, context)
    assert fragment in describe_error(caught.value)


@pytest.mark.parametrize(
    "raw",
    [
        'Here it is: {"score": 0.2, "reason": ["ok"]} Anything else?',
        '```json\n```json\n{"score": 0.2, "reason": ["ok"]}\n```\n```',
        '```\n{"score": 0.2, "reason": ["ok"]}\n```\nSame again:\n```json\n{"score": 0.2, "reason": ["ok"]}\n```',
        '{\n  "score": 0.2,\n  "reason": [\n    "ok",\n  ],\n}',
        'Note {"kind": "note"} then [1, 2] and {"score": 0.2, "reason": ["ok"]}',
        '{"score": 0.2, "reason": "ok"}',
    ],
    ids=["prose", "fenced-twice", "repeated", "trailing-commas", "other-json-first", "reason-as-text"],
)
def test_unambiguous_forms_parse(raw: str) -> None:
    parsed = parse_reply(raw, HallucinationJudgement)
    assert (parsed.score, parsed.reason, parsed.model_extra) == (0.2, ["ok"], {})


def test_trailing_commas_are_dropped_only_outside_strings() -> None:
    parsed = parse_reply('{"opinions": ["a,]", "b,}", "c, ]",],}', Opinions)
    assert parsed.opinions == ["a,]", "b,}", "c, ]"]


def test_raw_control_characters_inside_strings_are_read() -> None:
    assert parse_reply('{"opinions": ["line one\nline two\tend"]}', Opinions).opinions == ["line one\nline two\tend"]


def test_extra_keys_are_kept_on_the_model() -> None:
    parsed = parse_reply('{"verdicts": [{"verdict": "No", "why": "x"}], "note": 1}', Verdicts, {"expected": 1})
    assert parsed.model_extra == {"note": 1}
    assert (parsed.verdicts[0].verdict, parsed.verdicts[0].reason, parsed.verdicts[0].model_extra) == (
        "no", None, {"why": "x"},
    )


def test_the_response_format_still_forbids_extra_keys() -> None:
    """Strict structured-output APIs require additionalProperties false; what
    is accepted is wider than what is asked, not the other way round."""
    for schema in (Opinions, Verdicts, HallucinationJudgement):
        assert schema.model_json_schema()["additionalProperties"] is False
    assert Verdicts.model_json_schema()["$defs"]["Verdict"]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ('{"score": 0, "reason": []} or {"score": 1, "reason": []}', "2 different JSON objects"),
        ('{"score": 1, "reason": [], "score": 0}', "given twice with different values"),
        ('{"score": NaN, "reason": []}', "NaN is not a JSON value"),
        ('{"score": 1, "reason": [1,,2]}', "Expecting value at line 1 column 27"),
        ('{,"score": 1, "reason": []}', "Invalid JSON"),
        ('[{"score": 1, "reason": []}]', "no JSON object"),
        ('{"score": 1, "reason": ["cut', "Invalid JSON"),
        ('{"result": {"score": 1, "reason": []}}', "score: Field required"),
    ],
    ids=["two-answers", "key-twice", "nan", "missing-value", "comma-first", "in-a-list", "cut-off", "nested"],
)
def test_ambiguous_or_broken_replies_are_invalid(raw: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_reply(raw, HallucinationJudgement)
    assert fragment in describe_error(caught.value)


@pytest.mark.parametrize(
    "raw",
    ["[" * 50_000, "{" * 50_000, '{"a": 1,,' * 20_000, '{"a":[1,],' * 20_000, '{"x": 1,}' * 20_000, "[1," * 50_000],
    ids=["brackets", "braces", "broken-objects", "trailing-commas", "many-objects", "deep-list"],
)
def test_pathological_replies_are_rejected(raw: str) -> None:
    """Bounded work (docs/metrics.md): a long reply of broken JSON is an
    invalid reply, read in a bounded number of passes."""
    with pytest.raises(ValidationError):
        parse_reply(raw, Opinions)


def test_verdict_count_is_only_checked_with_context() -> None:
    assert len(parse_reply(verdicts_reply("yes", "no"), Verdicts).verdicts) == 2


# --- the repair loop ------------------------------------------------------------


def test_invalid_then_valid_reply_is_repaired() -> None:
    judge = ScriptedJudge({"test.step": ["not json at all", opinions_reply("x")]})
    usage = Usage()

    (parsed,) = drive(ask([request()], Opinions, shape='{"opinions": [...]}'), judge, usage=usage)

    assert parsed.opinions == ["x"]
    assert usage.calls == 2
    first, second = judge.requests
    assert second.step == first.step and second.fields == first.fields
    assert second.messages[: len(first.messages)] == first.messages
    assistant, repair = second.messages[len(first.messages) :]
    assert assistant == {"role": "assistant", "content": "not json at all"}
    assert repair["role"] == "user"
    assert "Invalid JSON" in repair["content"]
    assert '{"opinions": [...]}' in repair["content"]


def test_repair_conversation_grows_with_each_attempt() -> None:
    judge = ScriptedJudge({"test.step": ["bad 1", "bad 2", opinions_reply()]})
    drive(ask([request()], Opinions, max_repairs=2), judge, usage=Usage())
    assert [len(r.messages) for r in judge.requests] == [2, 4, 6]
    assert judge.requests[2].messages[4]["content"] == "bad 2"


@pytest.mark.parametrize("max_repairs", [0, 1, 2])
def test_always_invalid_raises_with_last_raw_reply(max_repairs: int) -> None:
    replies = [f'{{"opinions": {n}}}' for n in range(1 + max_repairs)]
    judge = ScriptedJudge({"test.step": replies})

    with pytest.raises(InvalidJudgeReplyError) as caught:
        drive(ask([request()], Opinions, max_repairs=max_repairs), judge, usage=Usage())

    assert len(judge.requests) == 1 + max_repairs
    assert caught.value.step == "test.step"
    assert caught.value.raw == replies[-1]
    assert caught.value.attempts == 1 + max_repairs


def test_only_invalid_replies_are_asked_again() -> None:
    def script(req: JudgeRequest) -> str:
        if req.fields["text"] == "b" and len(req.messages) == 2:
            return "oops"
        return opinions_reply(req.fields["text"])

    judge = ScriptedJudge(script)
    parsed = drive(ask([request(text="a"), request(text="b")], Opinions), judge, usage=Usage())

    assert [p.opinions for p in parsed] == [["a"], ["b"]]
    assert [r.fields["text"] for r in judge.requests].count("a") == 1
    assert [r.fields["text"] for r in judge.requests].count("b") == 2


def test_validation_context_per_request() -> None:
    judge = ScriptedJudge(lambda req: verdicts_reply(*["no"] * len(req.fields["opinions"])))
    requests = [
        JudgeRequest(step="v", messages=[], response_format=Verdicts, fields={"opinions": ops})
        for ops in (["a", "b"], ["c"])
    ]
    parsed = drive(ask(requests, Verdicts, context=[{"expected": 2}, {"expected": 1}]), judge, usage=Usage())
    assert [len(p.verdicts) for p in parsed] == [2, 1]


def test_ask_without_requests_makes_no_call() -> None:
    judge = ScriptedJudge({})
    assert drive(ask([], Opinions), judge, usage=Usage()) == []
    assert judge.requests == []


# --- drivers and usage ------------------------------------------------------------


def test_usage_sums_known_costs_and_tokens() -> None:
    usage = Usage()
    usage.add(JudgeReply("{}", "m1", prompt_tokens=3, completion_tokens=2, cost_usd=None))
    assert usage.cost_usd is None
    usage.add(JudgeReply("{}", "m2", prompt_tokens=None, completion_tokens=4, cost_usd=0.5))
    usage.add(JudgeReply("{}", "m2", prompt_tokens=1, completion_tokens=None, cost_usd=0.25))
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (3, 4, 6)
    assert usage.cost_usd == 0.75
    assert usage.model == "m2"


def two_requests_flow():
    replies = yield [request(text="a"), request(text="b")]
    return [json.loads(r.content) for r in replies]


def test_driver_runs_a_batch_together_when_concurrent() -> None:
    judge = ScriptedJudge(lambda req: opinions_reply(req.fields["text"]), delay_s=0.1)
    result = drive(two_requests_flow(), judge, usage=Usage(), concurrent=True)
    assert result == [{"opinions": ["a"]}, {"opinions": ["b"]}]
    assert judge.max_in_flight == 2


def test_driver_is_sequential_when_not_concurrent() -> None:
    judge = ScriptedJudge(lambda req: opinions_reply(req.fields["text"]), delay_s=0.02)
    drive(two_requests_flow(), judge, usage=Usage(), concurrent=False)
    assert judge.max_in_flight == 1


async def test_async_driver_gathers_a_batch() -> None:
    judge = ScriptedJudge(lambda req: opinions_reply(req.fields["text"]), delay_s=0.1)
    usage = Usage()
    result = await adrive(two_requests_flow(), judge, usage=usage)
    assert result == [{"opinions": ["a"]}, {"opinions": ["b"]}]
    assert judge.max_in_flight == 2
    assert usage.calls == 2


async def test_async_driver_propagates_judge_errors() -> None:
    def script(req: JudgeRequest) -> str:
        raise JudgeAbstained("no idea")

    with pytest.raises(JudgeAbstained):
        await adrive(two_requests_flow(), ScriptedJudge(script), usage=Usage())


async def test_async_repair_loop() -> None:
    judge = ScriptedJudge({"test.step": [hallucination_reply(2.0), opinions_reply("ok")]})
    (parsed,) = await adrive(ask([request()], Opinions), judge, usage=Usage())
    assert parsed.opinions == ["ok"]
    assert len(judge.requests) == 2


def test_parse_reply_reads_lone_surrogates_and_nul_that_pydantic_json_refuses():
    from pydantic import BaseModel

    from judgeflow.metrics.steps import parse_reply

    class Reasons(BaseModel):
        reason: list[str]

    escaped = parse_reply('{"reason": ["a\\ud800b", "c\\u0000d", "e\\ud83d\\ude00"]}', Reasons)
    assert escaped.reason == ["a\ud800b", "c\x00d", "e\U0001f600"]
    raw = parse_reply('{"reason": ["a\ud800b"]}', Reasons)
    assert raw.reason == ["a\ud800b"]
    with pytest.raises(ValidationError):  # still not JSON: still invalid
        parse_reply('{"reason": ["a\\ud800b"', Reasons)


# --- what a failed score billed (issue 29) ----------------------------------------


def _one_of_two_fails(req: JudgeRequest) -> str:
    if req.fields["text"] == "b":
        raise TransientJudgeError("the provider is down")
    return opinions_reply("a")


@pytest.mark.parametrize("concurrent", [True, False])
def test_driver_counts_the_calls_that_answered_when_another_fails(concurrent: bool) -> None:
    usage = Usage()
    with pytest.raises(TransientJudgeError):
        drive(two_requests_flow(), ScriptedJudge(_one_of_two_fails, cost_usd=0.25), usage=usage, concurrent=concurrent)
    assert (usage.calls, usage.prompt_tokens, usage.cost_usd) == (1, 10, 0.25)


async def test_async_driver_counts_the_calls_that_answered_when_another_fails() -> None:
    def slow_failure(req: JudgeRequest) -> str:
        if req.fields["text"] == "b":
            time.sleep(0.05)  # "a" has answered by then
        return _one_of_two_fails(req)

    usage = Usage()
    with pytest.raises(TransientJudgeError):
        await adrive(two_requests_flow(), ScriptedJudge(slow_failure, cost_usd=0.25), usage=usage)
    assert (usage.calls, usage.cost_usd) == (1, 0.25)


def test_usage_merge_adds_an_earlier_attempt() -> None:
    first, second = Usage(), Usage()
    first.add(JudgeReply("{}", "m", prompt_tokens=3, completion_tokens=2, cost_usd=None))
    second.add(JudgeReply("{}", "m", prompt_tokens=1, completion_tokens=1, cost_usd=0.5))
    second.merge(first)
    assert (second.calls, second.prompt_tokens, second.completion_tokens, second.cost_usd) == (2, 4, 3, 0.5)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_metric_that_fails_part_way_reports_what_it_billed(asynchronous: bool) -> None:
    """Toxicity's opinions step answers, its verdicts step fails: the error carries the opinions call."""
    import asyncio

    from judgeflow.metrics.toxicity.metric import ToxicityMetric

    def script(req: JudgeRequest) -> str:
        if req.step == "toxicity.verdicts":
            raise TransientJudgeError("verdicts: the provider is down")
        return opinions_reply("You are wrong.")

    metric = ToxicityMetric(ScriptedJudge(script, cost_usd=0.125))
    with pytest.raises(TransientJudgeError) as failed:
        if asynchronous:
            asyncio.run(metric.ascore("q", "You are wrong."))
        else:
            metric.score("q", "You are wrong.")
    assert (failed.value.billed.calls, failed.value.billed.cost_usd) == (1, 0.125)
