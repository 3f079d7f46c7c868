"""ToxicityMetric: steps, scoring rules, batching, inputs and accounting."""

from __future__ import annotations

import asyncio
import logging

import pytest
from judgeflow.metrics import ToxicityMetric
from judgeflow.metrics.data_block import parse_data_block
from judgeflow.metrics.toxicity import template as toxicity_template
from judgeflow.metrics.toxicity.metric import NO_OPINIONS_REASON, no_toxic_reason, toxicity_version, unique_opinions
from judgeflow.metrics.toxicity.schema import Opinions, ToxicityReason, Verdicts

from judgeflow.errors import ConfigError, InvalidJudgeReplyError, InvalidTraceError, JudgeAbstained
from judgeflow.judge.base import JudgeRequest
from tests.metrics.fakes import ScriptedJudge, keyword_verdicts, opinions_reply, reason_reply, verdicts_reply

OPINIONS = ["you are an idiot", "the plan is sound", "blue is nice", "the talk was long"]


def judge_for(opinions: list[str], **kwargs) -> ScriptedJudge:
    """Extracts ``opinions``; an opinion is toxic iff it contains "idiot"."""

    def script(request: JudgeRequest) -> str:
        if request.step == "toxicity.opinions":
            return opinions_reply(*opinions)
        if request.step == "toxicity.verdicts":
            return keyword_verdicts(request)
        return reason_reply("because of 'idiot'")

    return ScriptedJudge(script, **kwargs)


def test_one_of_four_toxic_scores_a_quarter() -> None:
    judge = judge_for(OPINIONS)
    result = ToxicityMetric(judge).score("How was the meeting?", "some output")

    assert result.name == "toxicity" and result.status == "scored"
    assert result.score == 0.25
    assert result.passed is True and result.threshold == 0.5
    assert result.reason == "because of 'idiot'"
    assert judge.steps() == ["toxicity.opinions", "toxicity.verdicts", "toxicity.reason"]
    assert result.details["opinions"] == OPINIONS
    assert result.details["verdicts"][0] == {
        "opinion": "you are an idiot", "verdict": "yes", "reason": "judged yes",
    }
    assert [row["verdict"] for row in result.details["verdicts"]] == ["yes", "no", "no", "no"]


def test_requests_carry_the_documented_fields_and_schemas() -> None:
    judge = judge_for(OPINIONS)
    ToxicityMetric(judge).score("the input", "the output")
    opinions, verdicts, reason = judge.requests
    assert opinions.response_format is Opinions
    assert dict(opinions.fields) == {"input": "the input", "output": "the output"}
    assert (verdicts.response_format, dict(verdicts.fields)) == (Verdicts, {"opinions": OPINIONS})
    assert reason.response_format is ToxicityReason
    assert dict(reason.fields) == {
        "score": 0.25, "toxic_reasons": ["judged yes"], "toxic_opinions": ["you are an idiot"],
        "opinion_count": 4, "toxic_count": 1, "strict_mode": False,
    }


def test_no_opinions_scores_zero_without_a_verdict_call() -> None:
    judge = judge_for([])
    result = ToxicityMetric(judge).score("q", "The museum opens at nine.")
    assert result.score == 0.0 and result.passed is True
    assert judge.steps() == ["toxicity.opinions"]
    assert result.reason == NO_OPINIONS_REASON
    assert result.details["opinions"] == [] and result.details["verdicts"] == []


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("opinions", [["the plan is sound"], ["the plan is sound", "I like it", "good call"]])
def test_opinions_none_toxic_score_zero_with_a_reason_and_no_reason_call(opinions, strict) -> None:
    """Nothing toxic to cite: the reason states the counts without a judge call
    (a third of a clean trace's calls), in either mode."""
    judge = judge_for(opinions)
    result = ToxicityMetric(judge, strict_mode=strict).score("q", "a")
    assert result.score == 0.0 and result.passed is True
    assert judge.steps() == ["toxicity.opinions", "toxicity.verdicts"]
    assert result.reason == no_toxic_reason(len(opinions))
    assert (f"{len(opinions)} opinions" in result.reason) == (len(opinions) > 1)
    assert [row["verdict"] for row in result.details["verdicts"]] == ["no"] * len(opinions)
    assert result.judge_calls == 2


def test_without_include_reason_no_reason_is_written() -> None:
    for opinions in ([], ["the plan is sound"], OPINIONS):
        judge = judge_for(opinions)
        result = ToxicityMetric(judge, include_reason=False).score("q", "a")
        assert result.reason is None and "toxicity.reason" not in judge.steps()


def test_blank_opinions_are_dropped() -> None:
    judge = judge_for(["  ", "you are an idiot", ""])
    result = ToxicityMetric(judge).score("q", "a")
    assert result.details["opinions"] == ["you are an idiot"]
    assert result.score == 1.0


def test_strict_mode_is_binary_with_threshold_zero() -> None:
    result = ToxicityMetric(judge_for(OPINIONS), threshold=0.5, strict_mode=True).score("q", "a")
    assert (result.score, result.threshold, result.passed) == (1.0, 0.0, False)

    clean = ToxicityMetric(judge_for(["the plan is sound"]), strict_mode=True).score("q", "a")
    assert (clean.score, clean.threshold, clean.passed) == (0.0, 0.0, True)


def test_strict_reason_is_told_the_rule_and_the_counts() -> None:
    """One toxic opinion of two: strict score 1.0. The reason step gets the
    strict rule and both counts, so it has no share to misstate."""
    judge = judge_for(["you are an idiot", "the plan is sound"])
    result = ToxicityMetric(judge, strict_mode=True).score("q", "a")
    assert result.score == 1.0
    (reason,) = judge.requests_for("toxicity.reason")
    system = reason.messages[0]["content"]
    assert system.startswith(toxicity_template.STRICT_REASON_INSTRUCTIONS)
    assert "at least one of the author's opinions was judged toxic" in system
    data = parse_data_block(reason.messages[1]["content"])
    assert (data["score"], data["toxic_count"], data["opinion_count"]) == (1.0, 1, 2)
    assert reason.fields["strict_mode"] is True


def test_default_reason_is_told_the_share_rule() -> None:
    judge = judge_for(["you are an idiot", "the plan is sound"])
    ToxicityMetric(judge).score("q", "a")
    (reason,) = judge.requests_for("toxicity.reason")
    assert reason.messages[0]["content"].startswith(toxicity_template.REASON_INSTRUCTIONS)
    data = parse_data_block(reason.messages[1]["content"])
    assert (data["score"], data["toxic_count"], data["opinion_count"]) == (0.5, 1, 2)


# --- duplicates and verdict case -------------------------------------------------


def test_duplicate_opinions_are_judged_and_counted_once() -> None:
    judge = judge_for(
        ["You are an idiot", "the plan is sound", "you  are an\nIDIOT", " The Plan is sound ", "the plan is sound."]
    )
    result = ToxicityMetric(judge).score("q", "a")
    unique = ["You are an idiot", "the plan is sound", "the plan is sound."]  # punctuation differs: kept
    assert result.details["opinions"] == unique
    assert result.details["duplicate_opinions"] == 2
    (verdicts,) = judge.requests_for("toxicity.verdicts")
    assert list(verdicts.fields["opinions"]) == unique
    assert result.score == pytest.approx(1 / 3)  # one toxic of three, not two of five


def test_unique_opinions_keeps_the_first_wording_in_order() -> None:
    assert unique_opinions(["B  b", "a", "b b", "A", "c\tC", "C c"]) == ["B  b", "a", "c\tC"]
    assert unique_opinions([]) == []


def test_without_duplicates_there_is_no_note() -> None:
    assert "duplicate_opinions" not in ToxicityMetric(judge_for(OPINIONS)).score("q", "a").details


@pytest.mark.parametrize("verdicts", [("Yes", "NO"), ("YES", "No"), ("yEs", "nO")])
def test_verdict_case_is_normalised_without_a_repair_call(verdicts: tuple[str, str]) -> None:
    judge = ScriptedJudge(
        {
            "toxicity.opinions": opinions_reply("you are an idiot", "fine"),
            "toxicity.verdicts": verdicts_reply(*verdicts),
            "toxicity.reason": reason_reply(),
        }
    )
    result = ToxicityMetric(judge).score("q", "a")
    assert [row["verdict"] for row in result.details["verdicts"]] == ["yes", "no"]
    assert result.score == 0.5 and result.judge_calls == 3


@pytest.mark.parametrize("bad", [" yes", "yes.", "y", "true", "toxic", "Ja", ""])
def test_other_verdicts_are_still_invalid_and_repaired(bad: str) -> None:
    judge = ScriptedJudge(
        {
            "toxicity.opinions": opinions_reply("you are an idiot"),
            "toxicity.verdicts": [verdicts_reply(bad), verdicts_reply("Yes")],
            "toxicity.reason": reason_reply(),
        }
    )
    result = ToxicityMetric(judge).score("q", "a")
    assert result.score == 1.0 and result.judge_calls == 4
    repair = judge.requests_for("toxicity.verdicts")[1].messages[-1]["content"]
    assert "verdicts.0.verdict" in repair


@pytest.mark.parametrize(
    ("threshold", "passed"), [(0.25, True), (0.2499, False), (0.0, False), (1.0, True)]
)
def test_threshold_is_a_maximum_and_inclusive(threshold: float, passed: bool) -> None:
    result = ToxicityMetric(judge_for(OPINIONS), threshold=threshold).score("q", "a")
    assert result.score == 0.25 and result.passed is passed


def test_without_reason_two_calls_and_no_reason() -> None:
    judge = judge_for(OPINIONS)
    result = ToxicityMetric(judge, include_reason=False).score("q", "a")
    assert judge.steps() == ["toxicity.opinions", "toxicity.verdicts"]
    assert result.reason is None and result.judge_calls == 2


def test_without_reason_and_no_opinions_reason_is_none() -> None:
    result = ToxicityMetric(judge_for([]), include_reason=False).score("q", "a")
    assert result.reason is None and result.judge_calls == 1


@pytest.mark.parametrize("output", ["", "  \n "])
def test_without_reason_an_empty_output_has_no_reason_either(output: str) -> None:
    result = ToxicityMetric(judge_for(OPINIONS), include_reason=False).score("q", output)
    assert (result.score, result.passed, result.reason, result.judge_calls) == (0.0, True, None, 0)


# --- verdict batching --------------------------------------------------------------

MANY = [f"opinion {n}" + (" idiot" if n % 5 == 0 else "") for n in range(25)]


def test_verdicts_are_batched() -> None:
    judge = judge_for(MANY)
    result = ToxicityMetric(judge, verdict_batch_size=10).score("q", "a")
    batches = [list(r.fields["opinions"]) for r in judge.requests_for("toxicity.verdicts")]
    assert batches == [MANY[:10], MANY[10:20], MANY[20:]]
    assert parse_data_block(judge.requests_for("toxicity.verdicts")[2].messages[1]["content"])["opinion_count"] == 5
    assert len(result.details["verdicts"]) == 25
    assert [row["opinion"] for row in result.details["verdicts"]] == MANY
    assert result.score == 5 / 25


def test_sync_batches_run_concurrently_in_async_mode() -> None:
    judge = judge_for(MANY, delay_s=0.1)
    ToxicityMetric(judge, verdict_batch_size=10, async_mode=True).score("q", "a")
    assert judge.max_in_flight == 3


def test_sync_batches_run_one_at_a_time_without_async_mode() -> None:
    judge = judge_for(MANY, delay_s=0.01)
    ToxicityMetric(judge, verdict_batch_size=10, async_mode=False).score("q", "a")
    assert judge.max_in_flight == 1


async def test_ascore_runs_batches_one_at_a_time_without_async_mode() -> None:
    judge = judge_for(MANY, delay_s=0.05)
    result = await ToxicityMetric(judge, verdict_batch_size=10, async_mode=False).ascore("q", "a")
    assert judge.max_in_flight == 1
    assert result.score == 5 / 25 and result.judge_calls == 5


@pytest.mark.parametrize(("async_mode", "in_flight"), [(True, 3), (False, 1)])
def test_async_mode_means_the_same_in_score_and_ascore(async_mode: bool, in_flight: int) -> None:
    """``score`` (a caller without a loop) runs ``ascore``: the batches in flight are the same."""
    sync_judge, async_judge = judge_for(MANY, delay_s=0.1), judge_for(MANY, delay_s=0.1)
    ToxicityMetric(sync_judge, verdict_batch_size=10, async_mode=async_mode).score("q", "a")
    asyncio.run(ToxicityMetric(async_judge, verdict_batch_size=10, async_mode=async_mode).ascore("q", "a"))
    assert sync_judge.max_in_flight == async_judge.max_in_flight == in_flight


async def test_ascore_runs_batches_concurrently() -> None:
    judge = judge_for(MANY, delay_s=0.1)
    result = await ToxicityMetric(judge, verdict_batch_size=10).ascore("q", "a")
    assert judge.max_in_flight == 3
    assert result.score == 5 / 25
    assert result.judge_calls == 5


def test_a_batch_with_the_wrong_verdict_count_alone_is_repaired() -> None:
    asked: list[int] = []

    def script(request: JudgeRequest) -> str:
        if request.step == "toxicity.opinions":
            return opinions_reply(*MANY[:15])
        if request.step == "toxicity.verdicts":
            size = len(request.fields["opinions"])
            asked.append(size)
            first_time = len(request.messages) == 2
            return verdicts_reply(*["no"] * (size - 1 if size == 5 and first_time else size))
        return reason_reply()

    judge = ScriptedJudge(script)
    result = ToxicityMetric(judge, verdict_batch_size=10).score("q", "a")
    assert sorted(asked) == [5, 5, 10]
    repair = judge.requests_for("toxicity.verdicts")[-1].messages[-1]["content"]
    assert "expected 5 verdicts (one per opinion), got 4" in repair
    # opinions, two verdict batches and the repair; no toxic opinion, so no reason call
    assert result.score == 0.0 and result.judge_calls == 4


def test_invalid_reply_error_propagates_with_raw() -> None:
    judge = ScriptedJudge({"toxicity.opinions": "I cannot do that."})
    with pytest.raises(InvalidJudgeReplyError) as caught:
        ToxicityMetric(judge, max_repairs=1).score("q", "a")
    assert caught.value.step == "toxicity.opinions"
    assert caught.value.raw == "I cannot do that."
    assert caught.value.attempts == 2 and len(judge.requests) == 2


# --- inputs ------------------------------------------------------------------------


@pytest.mark.parametrize("output", ["", "  \n "])
def test_empty_output_scores_zero_without_calls(output: str) -> None:
    judge = judge_for(OPINIONS)
    result = ToxicityMetric(judge).score("q", output)
    assert judge.requests == []
    assert (result.score, result.passed, result.reason) == (0.0, True, "output is empty")
    assert result.details["opinions"] == [] and result.judge_calls == 0
    assert result.judge_model == "scripted-judge" and result.cost_usd is None


def test_null_output_raises() -> None:
    with pytest.raises(InvalidTraceError, match="output is null"):
        ToxicityMetric(judge_for(OPINIONS)).score("q", None)


async def test_null_output_raises_in_ascore() -> None:
    with pytest.raises(InvalidTraceError, match="output is null"):
        await ToxicityMetric(judge_for(OPINIONS)).ascore("q", None)


def test_null_input_is_sent_as_empty_string() -> None:
    judge = judge_for([])
    ToxicityMetric(judge).score(None, "a")
    assert judge.requests[0].fields["input"] == ""


def test_long_output_is_truncated_before_prompting() -> None:
    judge = judge_for([])
    result = ToxicityMetric(judge, max_field_chars=100).score("q", "x" * 250)
    assert judge.requests[0].fields["output"] == "x" * 100
    assert result.details["truncated"] == {"output": 250}


# --- results -------------------------------------------------------------------------


def test_abstaining_judge_gives_a_skipped_result() -> None:
    def script(request: JudgeRequest) -> str:
        raise JudgeAbstained("offline judge cannot read this language")

    result = ToxicityMetric(ScriptedJudge(script), strict_mode=True).score("q", "a")
    assert result.status == "skipped"
    assert result.score is None and result.passed is None
    assert result.reason == "offline judge cannot read this language"
    assert result.threshold == 0.0 and result.judge_calls == 0


async def test_abstaining_judge_gives_a_skipped_result_in_ascore() -> None:
    def script(request: JudgeRequest) -> str:
        if request.step == "toxicity.verdicts":
            raise JudgeAbstained("no verdicts today")
        return opinions_reply("x")

    result = await ToxicityMetric(ScriptedJudge(script)).ascore("q", "a")
    assert (result.status, result.reason, result.judge_calls) == ("skipped", "no verdicts today", 1)


def test_usage_is_accounted() -> None:
    judge = judge_for(OPINIONS, model="judge-2024", cost_usd=0.01, delay_s=0.001)
    result = ToxicityMetric(judge).score("q", "a")
    assert result.judge_calls == 3
    assert (result.prompt_tokens, result.completion_tokens) == (30, 15)
    assert result.cost_usd == pytest.approx(0.03)
    assert result.judge_model == "judge-2024"
    assert result.latency_ms > 0
    assert result.metric_version == toxicity_version()


def test_unknown_cost_stays_none() -> None:
    result = ToxicityMetric(judge_for(OPINIONS, cost_usd=None)).score("q", "a")
    assert result.cost_usd is None


def test_ascore_matches_score() -> None:
    sync = ToxicityMetric(judge_for(OPINIONS)).score("q", "a")
    async_ = asyncio.run(ToxicityMetric(judge_for(OPINIONS)).ascore("q", "a"))
    ignore = {"latency_ms"}
    assert sync.model_dump(exclude=ignore) == async_.model_dump(exclude=ignore)


def test_verbose_mode_logs_and_records_steps(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="judgeflow.metrics.toxicity"):
        result = ToxicityMetric(judge_for(OPINIONS), verbose_mode=True).score("q", "a")
    steps = result.details["steps"]
    assert [s["step"] for s in steps] == ["toxicity.opinions", "toxicity.verdicts", "toxicity.score"]
    assert steps[0]["opinions"] == OPINIONS
    assert steps[2] == {"step": "toxicity.score", "score": 0.25, "toxic": 1, "opinions": 4}
    messages = [r.getMessage() for r in caplog.records if r.name == "judgeflow.metrics.toxicity"]
    assert len(messages) == 3 and messages[0].startswith("toxicity.opinions:")


def test_quiet_mode_records_no_steps(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="judgeflow.metrics.toxicity"):
        result = ToxicityMetric(judge_for(OPINIONS)).score("q", "a")
    assert "steps" not in result.details
    assert not [r for r in caplog.records if r.name == "judgeflow.metrics.toxicity"]


@pytest.mark.parametrize(
    "kwargs",
    [{"threshold": 1.5}, {"threshold": -0.1}, {"max_repairs": -1}, {"verdict_batch_size": 0}, {"max_field_chars": 0}],
)
def test_bad_parameters_are_config_errors(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        ToxicityMetric(judge_for([]), **kwargs)
