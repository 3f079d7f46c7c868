"""What every judge-backed metric shares: parameter checks, the one call the
engine makes (``ascore``), timing, usage accounting and turning an outcome
into a :class:`MetricResult`.

Subclasses write their logic once as a :data:`~judgeflow.metrics.steps.Flow`
(``flow(input, output, context)``) that returns an :class:`Outcome`;
``ascore`` runs it with :func:`~judgeflow.metrics.steps.adrive`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel

from judgeflow.metrics.inputs import check_max_field_chars
from judgeflow.metrics.reply import reply_extras
from judgeflow.metrics.result import MetricResult
from judgeflow.metrics.steps import Flow, Usage, adrive

from judgeflow.errors import ConfigError, JudgeAbstained, JudgeflowError
from judgeflow.judge.base import Judge


@dataclass(frozen=True)
class Outcome:
    """What a metric's flow concludes; usage and timing are added by the base."""

    score: float
    reason: str | None
    details: dict[str, Any] = field(default_factory=dict)


def keep_extras(details: dict[str, Any], step: str, reply: BaseModel) -> None:
    """Append the keys ``reply`` carried beyond its step's shape to
    ``details["reply_extras"]`` as ``{"step", "extra"}``, one entry per reply
    that had any, so what the judge said is kept without changing the score."""
    extra = reply_extras(reply)
    if extra:
        details.setdefault("reply_extras", []).append({"step": step, "extra": extra})


class JudgeMetric:
    name: ClassVar[str]
    # a score at or below the threshold passes; a metric whose higher score is better passes at or above it
    higher_is_better: ClassVar[bool] = False

    def __init__(
        self,
        judge: Judge | None,
        *,
        threshold: float,
        max_field_chars: int,
        max_repairs: int,
        async_mode: bool = True,
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"{self.name}: threshold must be a number in [0, 1], got {threshold!r}")
        if isinstance(max_repairs, bool) or not isinstance(max_repairs, int) or max_repairs < 0:
            raise ConfigError(f"{self.name}: max_repairs must be an integer >= 0, got {max_repairs!r}")
        self.judge = judge
        self.threshold = float(threshold)
        self.max_field_chars = check_max_field_chars(max_field_chars)
        self.max_repairs = max_repairs
        self.async_mode = async_mode

    @property
    def metric_version(self) -> str:
        raise NotImplementedError

    @property
    def judge_rounds(self) -> int:
        """Judge calls one score makes one after another at most (repairs
        aside): a scheduler starts scores with longer chains first."""
        raise NotImplementedError

    @property
    def effective_threshold(self) -> float:
        """The threshold ``passed`` is decided with (strict mode may override it)."""
        return self.threshold

    def flow(self, input: Any, output: Any, context: Any = None) -> Flow[Outcome]:
        """The metric's logic, free of I/O: the judge requests it needs and the outcome."""
        raise NotImplementedError

    async def ascore(self, input: Any, output: Any, context: Any = None, *, judge: Judge | None = None
                     ) -> MetricResult:
        """Score one trace: the one call the engine makes, whatever the metric
        (fields it does not read are ignored). ``judge``: the judge to ask
        (the pair's own, with its gate), else the one the metric was built with."""
        judge = judge if judge is not None else self.judge
        if judge is None:
            raise ConfigError(f"{self.name}: no judge to score with")
        usage = Usage()
        started = time.perf_counter()
        try:
            outcome = await adrive(self.flow(input, output, context), judge, usage=usage,
                                   concurrent=self.async_mode)
        except JudgeAbstained as abstained:
            return self._skipped(abstained, judge, usage, started)
        except JudgeflowError as error:
            error.billed = usage  # the calls made before the failure are billed all the same
            raise
        return self._scored(outcome, judge, usage, started)

    def score(self, input: Any, output: Any, context: Any = None) -> MetricResult:
        """:meth:`ascore` for a caller without an event loop (a script, a test),
        run on the process's judge loop, where runs and calibration run it too:
        litellm binds what it caches to the first loop that used it."""
        from judgeflow.judge.judge_loop import judge_loop

        return judge_loop().submit(self.ascore, input, output, context).result()

    def _scored(self, outcome: Outcome, judge: Judge, usage: Usage, started: float) -> MetricResult:
        threshold = self.effective_threshold
        return MetricResult(
            name=self.name,
            score=outcome.score,
            passed=outcome.score >= threshold if self.higher_is_better else outcome.score <= threshold,
            threshold=threshold,
            reason=outcome.reason,
            details=outcome.details,
            **self._accounting(judge, usage, started),
        )

    def _skipped(self, abstained: JudgeAbstained, judge: Judge, usage: Usage, started: float) -> MetricResult:
        return MetricResult(
            name=self.name,
            status="skipped",
            score=None,
            passed=None,
            threshold=self.effective_threshold,
            reason=str(abstained) or "judge abstained",
            **self._accounting(judge, usage, started),
        )

    def _accounting(self, judge: Judge, usage: Usage, started: float) -> dict[str, Any]:
        return {
            "judge_model": usage.model or judge.model,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_tokens": usage.cached_tokens,
            "cost_usd": usage.cost_usd,
            "latency_ms": (time.perf_counter() - started) * 1000.0,
            "judge_calls": usage.calls,
            "metric_version": self.metric_version,
        }
