"""The small judge interface metrics depend on.

A metric builds a :class:`JudgeRequest` per step and hands it to whatever
:class:`Judge` it was given: the litellm adapter in production, the offline
judge for key-less runs, or a test double in unit tests. Nothing here imports
litellm, prefect or sqlalchemy.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Protocol, runtime_checkable

from pydantic import BaseModel

if TYPE_CHECKING:
    from judgeflow.judge.send_gate import Call


@dataclass(frozen=True)
class JudgeRequest:
    """One judge call.

    ``step`` names the metric step (e.g. ``"toxicity.opinions"``) so judges that
    do not read prompts (the offline judge) know what is asked. ``fields`` holds
    the untrusted data the prompt was built from, already normalised and
    truncated. ``response_format`` is the pydantic model the reply must satisfy.
    ``model``: the model to ask instead of the judge's own (a metric's own
    judge model, :class:`BoundJudge`); None: the judge's. Same endpoint, key,
    slots and retry loop: only the model string and its prices change.
    """

    step: str
    messages: list[dict[str, str]]
    response_format: type[BaseModel]
    fields: Mapping[str, Any] = field(default_factory=dict)
    model: str | None = None


@dataclass(frozen=True)
class JudgeReply:
    """The raw text a judge returned, plus what the call cost.

    ``calls`` is how many attempts of this call reached the provider (an
    attempt that timed out before this one is billed all the same) and
    ``cost_usd`` what they all cost: this reply's usage priced, plus the
    estimate of each earlier attempt that brought no usage back
    (:mod:`judgeflow.judge.spend`). ``cached_tokens``: how many of the
    prompt tokens the provider served from its prompt cache (billed at its
    cached rate; they are part of ``prompt_tokens``, not added to them)."""

    content: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    latency_s: float = 0.0
    calls: int = 1


@dataclass
class Usage:
    """What judge calls cost, accumulated by whoever makes them (a metric's
    drivers, the adapter's attempts).

    ``cost_usd`` sums the known costs and stays None only while no reply had a
    known cost: a partly known cost is still a useful lower bound, while 0.0
    for "unknown" would be a lie. ``model`` is the model the last reply named
    (it may be more specific than the configured one, e.g. a dated snapshot).
    ``calls`` counts attempts that reached the provider. ``cached_tokens``
    counts the prompt tokens served from the provider's prompt cache (a part
    of ``prompt_tokens``).
    """

    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None
    calls: int = 0

    def merge(self, other: "Usage") -> None:
        """Add what ``other`` counted (e.g. an earlier, failed attempt of the same score)."""
        self.calls += other.calls
        self.model = other.model or self.model
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd

    def add(self, reply: JudgeReply) -> None:
        self.calls += reply.calls
        self.model = reply.model or self.model
        self.prompt_tokens += reply.prompt_tokens or 0
        self.completion_tokens += reply.completion_tokens or 0
        self.cached_tokens += reply.cached_tokens or 0
        if reply.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + reply.cost_usd

    def add_billed(self, error: BaseException) -> None:
        """Add what a failed call's attempts billed (the judge attaches it to
        its error as ``billed``; nothing when it sent none)."""
        billed = getattr(error, "billed", None)
        if isinstance(billed, Usage):
            self.merge(billed)


@runtime_checkable
class Judge(Protocol):
    """Answers judge requests. Implementations own timeouts, transient-error
    retries and the bound on calls in flight; they raise
    :class:`~judgeflow.errors.TransientJudgeError` once retries are used up and
    :class:`~judgeflow.errors.PermanentJudgeError` for requests that cannot
    succeed, with what the attempts they sent billed as the error's ``billed``
    (a :class:`Usage`).

    Optional capabilities, declared by every judge (:class:`JudgeBase` gives
    the defaults): ``start()`` starts what the judge needs before its first
    call (worker processes) without waiting for it; ``close()`` releases it.
    A caller may hand over as many calls as it likes: they wait for the
    judge's bound in the order of their ``call``'s priority, and each attempt
    asks the ``call``'s send gate before it is sent
    (:class:`~judgeflow.judge.send_gate.Call`; None: no gate, no priority)."""

    @property
    def model(self) -> str: ...

    def start(self) -> None: ...

    def close(self) -> None: ...

    def complete(self, request: JudgeRequest, call: "Call | None" = None) -> JudgeReply: ...

    async def acomplete(self, request: JudgeRequest, call: "Call | None" = None) -> JudgeReply: ...


class JudgeBase:
    """The capabilities' defaults: nothing to start; :meth:`complete` runs
    :meth:`acomplete` on the judge's own event loop (one thread, started on
    first use), so there is one retry loop and one bound on calls in flight
    whichever way the judge is called; :meth:`close` stops that loop."""

    def __init__(self) -> None:
        self._sync_lock = threading.Lock()
        self._sync_loop_: asyncio.AbstractEventLoop | None = None  # runs complete()'s calls

    def start(self) -> None:
        """Nothing to start."""

    def close(self) -> None:
        """Stop the loop :meth:`complete` runs on, if it was started."""
        lock = getattr(self, "_sync_lock", None)  # a judge that overrides complete() may never set it up
        if lock is None:
            return
        with lock:
            loop, self._sync_loop_ = self._sync_loop_, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    async def acomplete(self, request: JudgeRequest, call: "Call | None" = None) -> JudgeReply:
        raise NotImplementedError

    def complete(self, request: JudgeRequest, call: "Call | None" = None) -> JudgeReply:
        return asyncio.run_coroutine_threadsafe(self.acomplete(request, call), self._sync_loop()).result()

    def _sync_loop(self) -> asyncio.AbstractEventLoop:
        with self._sync_lock:
            if self._sync_loop_ is None:
                self._sync_loop_ = asyncio.new_event_loop()
                threading.Thread(target=self._sync_loop_.run_forever, name="judgeflow-judge-sync",
                                 daemon=True).start()
            return self._sync_loop_


class BoundJudge:
    """``judge`` with every call going with ``call`` (its send gate and
    priority) and, when ``model`` is given, asking that model (a metric's own
    judge model, :attr:`JudgeRequest.model`): what one pair of a run is given,
    so its metric calls a plain :class:`Judge` and the pair's gate, priority
    and model still reach the judge. A view: starting and closing are the
    judge's owner's."""

    def __init__(self, judge: Judge, call: "Call | None", model: str | None = None) -> None:
        self.judge, self.call, self._model = judge, call, model

    @property
    def model(self) -> str:
        return self._model or self.judge.model

    def _request(self, request: JudgeRequest) -> JudgeRequest:
        if self._model is None or request.model is not None:
            return request
        return replace(request, model=self._model)

    def start(self) -> None:
        """The judge's owner starts it."""

    def close(self) -> None:
        """The judge's owner closes it."""

    def complete(self, request: JudgeRequest, call: "Call | None" = None) -> JudgeReply:
        return self.judge.complete(self._request(request), call or self.call)

    async def acomplete(self, request: JudgeRequest, call: "Call | None" = None) -> JudgeReply:
        return await self.judge.acomplete(self._request(request), call or self.call)


def queue_ahead_for(max_concurrency: int) -> int:
    """Calls a judge worker holds prepared behind its bound of
    ``max_concurrency`` (:meth:`judgeflow.judge.config.JudgeConfig.dispatch_bound`):
    a quarter as many again, at least one."""
    return max(1, max_concurrency // 4)
