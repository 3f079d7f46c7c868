"""An in-memory judge double for metric unit tests.

It implements the :class:`~judgeflow.judge.base.Judge` protocol, answers from a
script and records every request, so tests can check both what a metric sent
and how it used the answers. Integration tests use the real judge server in
``tests/support/`` instead.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from judgeflow.judge.base import JudgeReply, JudgeRequest

# A script answers a request with reply text, or raises (e.g. JudgeAbstained).
Responder = Callable[[JudgeRequest], str]
Script = Responder | Mapping[str, str | Sequence[str]]


class ScriptedJudge:
    """Answers from ``script``: a callable, or a mapping step -> reply text (used
    for every request of that step) or list of replies (consumed in order)."""

    def __init__(
        self,
        script: Script,
        *,
        model: str = "scripted-judge",
        prompt_tokens: int | None = 10,
        completion_tokens: int | None = 5,
        cost_usd: float | None = 0.001,
        delay_s: float = 0.0,
    ) -> None:
        self._script = script
        self._model = model
        self._prompt_tokens = prompt_tokens
        self._completion_tokens = completion_tokens
        self._cost_usd = cost_usd
        self._delay_s = delay_s
        self._lock = threading.Lock()
        self._consumed: dict[str, int] = {}
        self.requests: list[JudgeRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def model(self) -> str:
        return self._model

    def steps(self) -> list[str]:
        return [request.step for request in self.requests]

    def requests_for(self, step: str) -> list[JudgeRequest]:
        return [request for request in self.requests if request.step == step]

    def complete(self, request: JudgeRequest, call=None) -> JudgeReply:
        self._enter(request)
        try:
            if self._delay_s:
                time.sleep(self._delay_s)
            return self._reply(request)
        finally:
            self._leave()

    async def acomplete(self, request: JudgeRequest, call=None) -> JudgeReply:
        self._enter(request)
        try:
            if self._delay_s:
                await asyncio.sleep(self._delay_s)
            return self._reply(request)
        finally:
            self._leave()

    def _enter(self, request: JudgeRequest) -> None:
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _reply(self, request: JudgeRequest) -> JudgeReply:
        content = self._content(request)
        return JudgeReply(
            content=content,
            model=self._model,
            prompt_tokens=self._prompt_tokens,
            completion_tokens=self._completion_tokens,
            cost_usd=self._cost_usd,
            latency_s=self._delay_s,
        )

    def _content(self, request: JudgeRequest) -> str:
        if callable(self._script):
            return self._script(request)
        answer = self._script[request.step]
        if isinstance(answer, str):
            return answer
        with self._lock:
            index = self._consumed.get(request.step, 0)
            self._consumed[request.step] = index + 1
        return answer[index]


def opinions_reply(*opinions: str) -> str:
    return json.dumps({"opinions": list(opinions)})


def verdicts_reply(*verdicts: str) -> str:
    return json.dumps({"verdicts": [{"verdict": v, "reason": f"judged {v}"} for v in verdicts]})


def reason_reply(reason: str = "explained") -> str:
    return json.dumps({"reason": reason})


def hallucination_reply(score: float, *reasons: str) -> str:
    return json.dumps({"score": score, "reason": list(reasons)})


def keyword_verdicts(request: JudgeRequest, toxic_word: str = "idiot") -> str:
    """Verdicts for exactly the opinions asked about: toxic iff they contain ``toxic_word``."""
    opinions: list[Any] = list(request.fields["opinions"])
    return verdicts_reply(*("yes" if toxic_word in opinion else "no" for opinion in opinions))


# Replies in the forms real models write them (shared with the judge server).
from tests.support.reply_forms import LAX_FORMS  # noqa: E402


def lax(script: Responder, form: str) -> Responder:
    """``script``'s answers rewritten in ``form`` (a key of :data:`LAX_FORMS`)."""
    rewrite = LAX_FORMS[form]
    return lambda request: rewrite(script(request))
