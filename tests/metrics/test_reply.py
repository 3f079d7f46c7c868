"""Judge replies as real models write them: every unambiguous form is accepted
with no repair call and gives the strict form's score; every still-invalid
form costs exactly one repair call and is scored right after it."""

from __future__ import annotations

import json

import pytest
from judgeflow.metrics import HallucinationMetric, ToxicityMetric
from judgeflow.metrics.reply import MAX_EXTRA_CHARS

from judgeflow.judge.base import JudgeRequest
from tests.metrics.fakes import (
    LAX_FORMS,
    ScriptedJudge,
    hallucination_reply,
    keyword_verdicts,
    lax,
    opinions_reply,
    reason_reply,
)

# output -> the opinions the judge finds in it; an opinion is toxic iff it holds "idiot"
TOXICITY_TRACES = {
    "mixed": ["you are an idiot", "the plan is sound", "blue is nice"],
    "all toxic": ["what an idiot", "an idiot wrote this"],
    "clean": ["the plan is sound"],
    "no opinions": [],
    "half": ["you are an idiot", "blue is nice"],
}
# output -> the judge's hallucination score
HALLUCINATION_TRACES = {"faithful": 0.0, "hallucinated": 1.0, "graded": 0.5}


def toxicity_script(request: JudgeRequest) -> str:
    if request.step == "toxicity.opinions":
        return opinions_reply(*TOXICITY_TRACES[request.fields["output"]])
    if request.step == "toxicity.verdicts":
        return keyword_verdicts(request)
    return reason_reply("because of 'idiot'")


def hallucination_script(request: JudgeRequest) -> str:
    score = HALLUCINATION_TRACES[request.fields["output"]]
    return hallucination_reply(score, "first finding", "second finding")


def repairs(judge: ScriptedJudge) -> int:
    # a repair re-asks with the invalid reply and the correction appended
    return sum(1 for request in judge.requests if len(request.messages) > 2)


def toxicity_results(script, **kwargs):
    judge = ScriptedJudge(script)
    metric = ToxicityMetric(judge, **kwargs)
    return judge, {output: metric.score("q", output) for output in TOXICITY_TRACES}


def hallucination_results(script):
    judge = ScriptedJudge(script)
    metric = HallucinationMetric(judge)
    return judge, {output: metric.score("q", output, ["some context"]) for output in HALLUCINATION_TRACES}


@pytest.mark.parametrize("form", sorted(LAX_FORMS))
@pytest.mark.parametrize("strict_mode", [False, True])
def test_toxicity_accepts_every_form_without_a_repair(form: str, strict_mode: bool) -> None:
    strict_judge, strict = toxicity_results(toxicity_script, strict_mode=strict_mode)
    lax_judge, accepted = toxicity_results(lax(toxicity_script, form), strict_mode=strict_mode)

    assert repairs(lax_judge) == 0 and len(lax_judge.requests) == len(strict_judge.requests)
    for output, result in accepted.items():
        expected = strict[output]
        assert (result.status, result.score, result.passed, result.reason, result.judge_calls) == (
            expected.status, expected.score, expected.passed, expected.reason, expected.judge_calls,
        ), output
        assert [row["verdict"] for row in result.details["verdicts"]] == [
            row["verdict"] for row in expected.details["verdicts"]
        ]
    assert [accepted[o].score for o in TOXICITY_TRACES] == (
        [1.0, 1.0, 0.0, 0.0, 1.0] if strict_mode else [1 / 3, 1.0, 0.0, 0.0, 0.5]
    )


@pytest.mark.parametrize("form", sorted(LAX_FORMS))
def test_hallucination_accepts_every_form_without_a_repair(form: str) -> None:
    strict_judge, strict = hallucination_results(hallucination_script)
    lax_judge, accepted = hallucination_results(lax(hallucination_script, form))

    assert repairs(lax_judge) == 0 and len(lax_judge.requests) == len(strict_judge.requests) == 3
    for output, result in accepted.items():
        expected = strict[output]
        assert (result.score, result.passed, result.reason) == (expected.score, expected.passed, expected.reason)
    # the judge's value is stored as it is: 0.5 stays 0.5
    assert [accepted[o].score for o in HALLUCINATION_TRACES] == [0.0, 1.0, 0.5]


def test_a_verdict_without_a_reason_is_stored_with_none() -> None:
    judge = ScriptedJudge(lax(toxicity_script, "deepeval"))
    result = ToxicityMetric(judge).score("q", "mixed")
    assert result.details["verdicts"] == [
        {"opinion": "you are an idiot", "verdict": "yes", "reason": "judged yes"},
        {"opinion": "the plan is sound", "verdict": "no", "reason": None},
        {"opinion": "blue is nice", "verdict": "no", "reason": None},
    ]


def test_a_toxic_verdict_without_a_reason_reaches_the_reason_step_as_null() -> None:
    def script(request: JudgeRequest) -> str:
        if request.step == "toxicity.verdicts":
            return json.dumps({"verdicts": [{"verdict": "yes"}, {"verdict": "no"}]})
        return toxicity_script(request)

    judge = ScriptedJudge(script)
    result = ToxicityMetric(judge).score("q", "all toxic")
    assert result.score == 0.5 and repairs(judge) == 0
    (reason_request,) = judge.requests_for("toxicity.reason")
    assert reason_request.fields["toxic_reasons"] == [None]
    assert reason_request.fields["toxic_opinions"] == ["what an idiot"]


def test_extra_keys_are_kept_in_details() -> None:
    judge = ScriptedJudge(lax(toxicity_script, "extra-keys"))
    result = ToxicityMetric(judge).score("q", "mixed")
    assert result.details["reply_extras"] == [
        {"step": "toxicity.opinions", "extra": {"confidence": 0.9}},
        {"step": "toxicity.verdicts", "extra": {"confidence": 0.9}},
        {"step": "toxicity.reason", "extra": {"confidence": 0.9}},
    ]
    assert all(row["extra"] == {"category": "none"} for row in result.details["verdicts"])

    hallucination = HallucinationMetric(ScriptedJudge(lax(hallucination_script, "extra-keys")))
    details = hallucination.score("q", "hallucinated", ["c"]).details
    assert details["reply_extras"] == [{"step": "hallucination", "extra": {"confidence": 0.9}}]


def test_strict_replies_add_no_extras_entry() -> None:
    result = ToxicityMetric(ScriptedJudge(toxicity_script)).score("q", "mixed")
    assert "reply_extras" not in result.details
    assert all("extra" not in row for row in result.details["verdicts"])


def test_long_extra_keys_keep_only_their_names() -> None:
    analysis = "x" * (MAX_EXTRA_CHARS + 1)
    judge = ScriptedJudge({"hallucination": json.dumps({"score": 1, "reason": ["r"], "analysis": analysis})})
    result = HallucinationMetric(judge).score("q", "o", ["c"])
    (entry,) = result.details["reply_extras"]
    assert entry["extra"]["keys"] == ["analysis"] and analysis not in json.dumps(entry)


# --- what is still invalid: one repair, then the strict reply is scored -------------

STILL_INVALID_VERDICTS = {
    "missing verdicts": '{"verdict": "yes", "reason": "r"}',
    "wrong count": '{"verdicts": [{"verdict": "yes"}]}',
    "verdict maybe": '{"verdicts": [{"verdict": "yes"}, {"verdict": "maybe"}]}',
    "verdict with a space": '{"verdicts": [{"verdict": " yes"}, {"verdict": "no"}]}',
    "verdict as a boolean": '{"verdicts": [{"verdict": true}, {"verdict": false}]}',
    "verdicts in a list": '[{"verdicts": [{"verdict": "yes"}, {"verdict": "no"}]}]',
    "two different answers": (
        '{"verdicts": [{"verdict": "no"}, {"verdict": "no"}]} or rather '
        '{"verdicts": [{"verdict": "yes"}, {"verdict": "no"}]}'
    ),
    "a key twice": '{"verdicts": [{"verdict": "yes", "verdict": "no"}, {"verdict": "no"}]}',
    "cut off": '{"verdicts": [{"verdict": "yes"}, {"verdict": "n',
    "no JSON": "The first opinion is toxic, the second is not.",
    "missing value": '{"verdicts": [{"verdict": "yes"},, {"verdict": "no"}]}',
}

STILL_INVALID_HALLUCINATION = {
    "score above 1": '{"score": 1.5, "reason": ["r"]}',
    "score below 0": '{"score": -0.1, "reason": ["r"]}',
    "score NaN": '{"score": NaN, "reason": ["r"]}',
    "score as a word": '{"score": "high", "reason": ["r"]}',
    "missing score": '{"reason": ["r"]}',
    "missing reason": '{"score": 1}',
    "two different answers": '{"score": 0, "reason": []} {"score": 1, "reason": ["r"]}',
    "no JSON": "Score: 1. The output invents a date.",
}


@pytest.mark.parametrize("invalid", list(STILL_INVALID_VERDICTS.values()), ids=list(STILL_INVALID_VERDICTS))
def test_an_invalid_verdicts_reply_is_repaired_once_then_scored(invalid: str) -> None:
    first = {"done": False}

    def script(request: JudgeRequest) -> str:
        if request.step == "toxicity.verdicts" and not first["done"]:
            first["done"] = True
            return invalid
        return toxicity_script(request)

    judge = ScriptedJudge(script)
    result = ToxicityMetric(judge).score("q", "half")

    assert repairs(judge) == 1
    assert judge.steps() == ["toxicity.opinions", "toxicity.verdicts", "toxicity.verdicts", "toxicity.reason"]
    repaired = judge.requests[2]
    assert repaired.messages[2] == {"role": "assistant", "content": invalid}
    assert result.status == "scored" and result.score == 0.5 and result.judge_calls == 4


@pytest.mark.parametrize(
    "invalid", list(STILL_INVALID_HALLUCINATION.values()), ids=list(STILL_INVALID_HALLUCINATION)
)
def test_an_invalid_hallucination_reply_is_repaired_once_then_scored(invalid: str) -> None:
    judge = ScriptedJudge({"hallucination": [invalid, hallucination_reply(1.0, "invented a date")]})
    result = HallucinationMetric(judge).score("q", "o", ["c"])

    assert repairs(judge) == 1 and len(judge.requests) == 2
    assert judge.requests[1].messages[2] == {"role": "assistant", "content": invalid}
    assert (result.score, result.passed, result.reason, result.judge_calls) == (1.0, False, "invented a date", 2)


@pytest.mark.parametrize(
    ("step", "invalid"),
    [
        ("toxicity.opinions", '{"opinions": "you are an idiot"}'),
        ("toxicity.opinions", "Opinions: you are an idiot"),
        ("toxicity.reason", '{"reason": null}'),
        ("toxicity.reason", '{"explanation": "because"}'),
    ],
)
def test_invalid_opinions_and_reason_replies_are_repaired_once(step: str, invalid: str) -> None:
    used = {"done": False}

    def script(request: JudgeRequest) -> str:
        if request.step == step and not used["done"]:
            used["done"] = True
            return invalid
        return toxicity_script(request)

    judge = ScriptedJudge(script)
    result = ToxicityMetric(judge).score("q", "mixed")
    assert repairs(judge) == 1 and judge.steps().count(step) == 2
    assert result.score == pytest.approx(1 / 3) and result.reason == "because of 'idiot'"
