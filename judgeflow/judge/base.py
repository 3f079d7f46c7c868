"""The small judge interface metrics depend on.

A metric builds a :class:`JudgeRequest` per step and hands it to whatever
:class:`Judge` it was given: the litellm adapter in production, the offline
judge for key-less runs, or a test double in unit tests. Nothing here imports
litellm, prefect or sqlalchemy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

from pydantic import BaseModel


@dataclass(frozen=True)
class JudgeRequest:
    """One judge call.

    ``step`` names the metric step (e.g. ``"toxicity.opinions"``) so judges that
    do not read prompts (the offline judge) know what is asked. ``fields`` holds
    the untrusted data the prompt was built from, already normalised and
    truncated. ``response_format`` is the pydantic model the reply must satisfy.
    """

    step: str
    messages: list[dict[str, str]]
    response_format: type[BaseModel]
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeReply:
    """The raw text a judge returned, plus what the call cost."""

    content: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    latency_s: float = 0.0


@runtime_checkable
class Judge(Protocol):
    """Answers judge requests. Implementations own timeouts, transient-error
    retries and the bound on calls in flight; they raise
    :class:`~judgeflow.errors.TransientJudgeError` once retries are used up and
    :class:`~judgeflow.errors.PermanentJudgeError` for requests that cannot succeed."""

    @property
    def model(self) -> str: ...

    def complete(self, request: JudgeRequest) -> JudgeReply: ...

    async def acomplete(self, request: JudgeRequest) -> JudgeReply: ...


def queue_ahead_for(max_concurrency: int) -> int:
    """The ``queue_ahead`` of a judge that holds calls prepared behind a bound of
    ``max_concurrency``: a quarter as many again (16 for 64; more measured no
    better, docs/benchmark.md), at least one."""
    return max(1, max_concurrency // 4)


def queue_ahead(judge: object) -> int:
    """How many calls a caller may hand ``judge`` beyond its bound on calls in
    flight (its optional ``queue_ahead`` attribute; 0 without one): a judge
    that enforces the bound itself and keeps such calls prepared starts one the
    moment a call in flight ends, instead of waiting for the caller's next.
    The judge never has more than its bound in flight either way."""
    value = getattr(judge, "queue_ahead", 0)
    return value if isinstance(value, int) and value > 0 else 0
