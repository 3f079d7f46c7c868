"""What judge replies in real models' forms cost: ``.venv/bin/python -m bench.reply_forms``.

The scenario of issue 32: a judge that answers every step the way many models
do, with the JSON inside a sentence and a code fence, a "no" verdict without
a reason, an extra key and a trailing comma, every time it is asked (repair
calls included). Its answers are the offline judge's, rewritten in that form,
so the strict form of the same answers is known: both metrics score
``--traces`` demo traces that have context (2 pairs each) once with the
offline judge as it is and once with the rewriting judge, with the metrics'
defaults (two repairs at most). Reported: judge calls (first asks and
repairs), pairs that failed, and pairs whose status and score equal the
strict form's.

Self-contained on purpose (no import from tests/): run from another checkout
(``cd ../main && .venv/bin/python /path/to/bench/reply_forms.py``) it
measures that checkout's metrics.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone

from judgeflow.demo import load_demo_traces
from judgeflow.errors import InvalidJudgeReplyError
from judgeflow.judge.base import JudgeReply, JudgeRequest
from bench.offline_evaluation import offline_judge
from judgeflow.metrics import HallucinationMetric, ToxicityMetric
from tests.support.reply_forms import with_trailing_commas


def habitual_form(strict: str) -> str:
    """``strict`` as the issue's judge writes it."""
    answer = json.loads(strict)
    if "verdicts" in answer:
        answer["verdicts"] = [
            {"verdict": "no"} if verdict["verdict"] == "no" else verdict for verdict in answer["verdicts"]
        ]
    answer["confidence"] = 0.9
    return f"Sure! Here is my answer:\n```json\n{with_trailing_commas(answer)}\n```\nLet me know if you need more."


class HabitualJudge:
    """The offline judge's answers in :func:`habitual_form`, counting calls."""

    def __init__(self) -> None:
        self.inner = offline_judge()
        self.calls = 0
        self.repairs = 0

    @property
    def model(self) -> str:
        return "habitual/" + self.inner.model

    def complete(self, request: JudgeRequest, call=None) -> JudgeReply:
        self.calls += 1
        self.repairs += len(request.messages) > 2  # a repair appends the reply and a correction
        reply = self.inner.complete(request)
        return JudgeReply(content=habitual_form(reply.content), model=self.model)

    async def acomplete(self, request: JudgeRequest, call=None) -> JudgeReply:
        return self.complete(request)


def outcome(score) -> tuple[str, float | None]:
    try:
        result = score()
    except InvalidJudgeReplyError:
        return "failed", None
    return result.status, result.score


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=120, help="demo traces with context (2 pairs each)")
    args = parser.parse_args(argv)

    rows = [row for row in load_demo_traces(datetime.now(timezone.utc)) if row["context"]][: args.traces]
    strict_judge, habitual = offline_judge(), HabitualJudge()
    metrics = {
        "strict": (ToxicityMetric(strict_judge, async_mode=False), HallucinationMetric(strict_judge)),
        "habitual": (ToxicityMetric(habitual, async_mode=False), HallucinationMetric(habitual)),
    }
    outcomes: dict[str, list[tuple[str, float | None]]] = {"strict": [], "habitual": []}
    for name, (toxicity, hallucination) in metrics.items():
        for row in rows:
            outcomes[name].append(outcome(lambda: toxicity.score(row["input"], row["output"])))
            outcomes[name].append(
                outcome(lambda: hallucination.score(row["input"], row["output"], row["context"]))
            )
    pairs = len(outcomes["strict"])
    same = sum(a == b for a, b in zip(outcomes["strict"], outcomes["habitual"], strict=True))
    failed = sum(status == "failed" for status, _ in outcomes["habitual"])
    report = {
        "pairs": pairs,
        "judge_calls": habitual.calls,
        "first_calls": habitual.calls - habitual.repairs,
        "repair_calls": habitual.repairs,
        "failed_pairs": failed,
        "same_as_strict": same,
        "metric_versions": [metrics["habitual"][0].metric_version, metrics["habitual"][1].metric_version],
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
