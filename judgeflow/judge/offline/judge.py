"""The :class:`OfflineJudge` adapter: dispatches on ``request.step`` to the
answer the step's metric declares (its spec's ``offline``; judgeflow's own
in :mod:`judgeflow.judge.offline.answers`) and validates each reply against
the step's response schema."""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from judgeflow.errors import InvalidJudgeReplyError, JudgeAbstained, PermanentJudgeError
from judgeflow.judge.base import JudgeBase, JudgeReply, JudgeRequest
from judgeflow.judge.offline import classifier

MODEL_NAME = "offline/profanity-svm+overlap-v1"

@functools.cache
def _resolve(target: str) -> Callable[[Any, str], tuple[dict[str, Any], dict[str, Any] | None]]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def offline_answer(step: str, answers: Mapping[str, str],
                   steps: frozenset[str]) -> Callable[[Any, str], tuple[dict[str, Any], dict[str, Any] | None]]:
    """The function answering ``step`` (``answers``: step -> ``"module:function"``); a step of a
    metric (``steps``) without one abstains, a step no metric has is a permanent error."""
    if step not in answers:
        if step in steps:  # a metric without offline answers
            raise JudgeAbstained(f"the offline judge has no answer for step {step!r}: its metric declares none")
        raise PermanentJudgeError(f"offline judge does not know step {step!r} (it answers {', '.join(answers)})")
    try:
        return _resolve(answers[step])
    except (ImportError, AttributeError) as error:
        raise PermanentJudgeError(f"offline judge: step {step!r}'s answer {answers[step]} cannot be loaded: "
                                  f"{error}") from None


class OfflineJudge(JudgeBase):
    """A :class:`~judgeflow.judge.base.Judge` that needs no network and no key."""

    def __init__(self, model: str = MODEL_NAME, *, answers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
                 steps: Iterable[str] = ()) -> None:
        """``answers`` and ``steps``: what the metrics declare (:func:`judgeflow.judge.config.offline_answers_of`),
        handed in by whoever builds the judge."""
        if not model.startswith("offline/"):
            model = f"offline/{model}"
        self._model = model
        self._answers = dict(answers)
        self._steps = frozenset(steps) | frozenset(self._answers)

    @property
    def model(self) -> str:
        return self._model

    def __repr__(self) -> str:
        return f"OfflineJudge(model={self._model!r})"

    def complete(self, request: JudgeRequest, call: Any = None) -> JudgeReply:
        # no slots and nothing sent: the call's gate has nothing to guard
        started = time.perf_counter()
        payload, context = self._answer(request)
        content = json.dumps(payload, ensure_ascii=False)
        self._validate(request, content, context)
        return JudgeReply(
            content=content,
            model=self._model,
            prompt_tokens=0,
            completion_tokens=0,
            cost_usd=0.0,
            latency_s=time.perf_counter() - started,
        )

    async def acomplete(self, request: JudgeRequest, call: Any = None) -> JudgeReply:
        # CPU-cheap (milliseconds); the first call loads the classifier, which
        # is why it is not run in the event loop's thread on first use.
        if not classifier.is_loaded():
            return await asyncio.to_thread(self.complete, request)
        return self.complete(request)

    # ------------------------------------------------------------------

    def _answer(self, request: JudgeRequest) -> tuple[dict[str, Any], dict[str, Any] | None]:
        answer = offline_answer(request.step, self._answers, self._steps)
        return answer(request.fields, request.step)

    def _validate(self, request: JudgeRequest, content: str, context: dict[str, Any] | None) -> None:
        schema = request.response_format
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            return
        try:
            schema.model_validate_json(content, context=context)
        except ValidationError as error:
            raise InvalidJudgeReplyError(
                f"offline judge produced a reply that does not match {schema.__name__}: {error}",
                step=request.step,
                raw=content,
                attempts=1,
            ) from error
