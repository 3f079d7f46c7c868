"""The :class:`OfflineJudge` adapter: dispatches on ``request.step`` to the
step modules and validates each reply against the step's response schema."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from pydantic import BaseModel, ValidationError

from judgeflow.errors import InvalidJudgeReplyError, PermanentJudgeError
from judgeflow.judge.base import JudgeBase, JudgeReply, JudgeRequest
from judgeflow.judge.offline import classifier
from judgeflow.judge.offline.opinions import extract_opinions
from judgeflow.judge.offline.overlap import hallucination_judgement
from judgeflow.judge.offline.verdicts import toxic_verdicts, toxicity_reason

MODEL_NAME = "offline/profanity-svm+overlap-v1"

STEPS = ("toxicity.opinions", "toxicity.verdicts", "toxicity.reason", "hallucination")


def _require(fields: Any, name: str, step: str) -> Any:
    if not hasattr(fields, "get") or name not in fields:
        raise PermanentJudgeError(f"offline judge: step {step!r} needs field {name!r}")
    return fields[name]


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


class OfflineJudge(JudgeBase):
    """A :class:`~judgeflow.judge.base.Judge` that needs no network and no key."""

    def __init__(self, model: str = MODEL_NAME) -> None:
        if not model.startswith("offline/"):
            model = f"offline/{model}"
        self._model = model

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
        step, fields = request.step, request.fields
        if step == "toxicity.opinions":
            output = _as_text(_require(fields, "output", step))
            return {"opinions": extract_opinions(output)}, None
        if step == "toxicity.verdicts":
            opinions = _require(fields, "opinions", step)
            if not isinstance(opinions, (list, tuple)):
                raise PermanentJudgeError("offline judge: 'opinions' must be a list of strings")
            texts = [_as_text(o) for o in opinions]
            verdicts = [
                {"verdict": "yes" if v.toxic else "no", "reason": v.reason} for v in toxic_verdicts(texts)
            ]
            return {"verdicts": verdicts}, {"expected": len(texts)}
        if step == "toxicity.reason":
            reason = toxicity_reason(
                _require(fields, "score", step),
                [_as_text(r) for r in fields.get("toxic_reasons") or []],
                [_as_text(o) for o in fields.get("toxic_opinions") or []],
            )
            return {"reason": reason}, None
        if step == "hallucination":
            output = _as_text(_require(fields, "output", step))
            score, reasons = hallucination_judgement(output, fields.get("context"))
            return {"score": score, "reason": reasons}, None
        raise PermanentJudgeError(
            f"offline judge does not know step {step!r} (it answers {', '.join(STEPS)})"
        )

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
