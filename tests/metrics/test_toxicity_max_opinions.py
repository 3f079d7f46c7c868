"""The cap on opinions judged per trace: the verdict calls a trace can cost
are bounded whatever its text asks the judge to extract."""

from __future__ import annotations

import pytest

from judgeflow.errors import ConfigError
from judgeflow.judge.base import JudgeRequest
from judgeflow.metrics.toxicity.metric import ToxicityMetric
from tests.metrics.fakes import ScriptedJudge, keyword_verdicts, opinions_reply, reason_reply


def _judge(opinions: list[str]) -> ScriptedJudge:
    def script(request: JudgeRequest) -> str:
        if request.step == "toxicity.opinions":
            return opinions_reply(*opinions)
        if request.step == "toxicity.verdicts":
            return keyword_verdicts(request)
        return reason_reply("why")

    return ScriptedJudge(script)


def test_only_the_first_max_opinions_are_judged_and_the_drop_is_noted() -> None:
    opinions = [f"opinion {i} idiot" if i < 3 else f"opinion {i}" for i in range(500)]
    judge = _judge(opinions)

    result = ToxicityMetric(judge, max_opinions=30, verdict_batch_size=10).score("q", "output")

    verdict_requests = [r for r in judge.requests if r.step == "toxicity.verdicts"]
    assert len(verdict_requests) == 3 and sum(len(r.fields["opinions"]) for r in verdict_requests) == 30
    assert result.details["opinions"] == opinions[:30]
    assert result.details["opinions_dropped"]["extracted"] == 500
    assert result.details["opinions_dropped"]["judged"] == 30
    assert result.score == pytest.approx(3 / 30)


def test_under_the_cap_nothing_is_dropped_or_noted() -> None:
    result = ToxicityMetric(_judge(["a idiot", "b"]), max_opinions=2).score("q", "output")
    assert "opinions_dropped" not in result.details and result.score == 0.5


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_max_opinions_must_be_a_positive_integer(bad) -> None:
    with pytest.raises(ConfigError):
        ToxicityMetric(_judge([]), max_opinions=bad)
