"""The one place where an attempt sent to the judge's provider becomes spend.

A provider bills every request it received, whether or not its reply reached
us: an attempt that timed out, lost its connection after the request went
out, or got a 5xx is billed as well as one that answered. :class:`CallSpend`
follows one judge call through its attempts (the one retry loop,
:func:`judgeflow.judge.retry.send_with_retries`, whichever judge sends them) and
counts each attempt that was sent:

* an attempt that answered with usage counts at that usage, priced
  (:func:`usage_cost` at configured prices; litellm's own price of the
  response otherwise), its cached prompt tokens at the cached rate;
* an attempt sent that brought no usage back counts at its estimate
  (:func:`attempt_estimate`): its prompt's characters at
  :data:`CHARS_PER_TOKEN` plus :data:`COMPLETION_TOKENS_PER_CALL` completion
  tokens, at the judge's prices;
* an attempt refused before any work (429, 4xx) or never sent (connection
  refused) costs nothing.

The total reaches the caller on the reply (``JudgeReply.calls`` and
``cost_usd``) or, when the call fails, on the error (``billed``, a
:class:`~judgeflow.judge.base.Usage`). Budgets, the stored ``cost_usd`` and
``judge_calls`` and the run summary all add up these figures and no others.
Without prices (an unpriced model) the cost stays unknown (None); the calls
are still counted.
"""

from __future__ import annotations

from judgeflow.judge.base import JudgeReply, JudgeRequest, Usage

CHARS_PER_TOKEN = 4.0
# completion tokens an attempt without usage is assumed to have cost: a
# judge's reply is a short JSON object
COMPLETION_TOKENS_PER_CALL = 60


def usage_cost(prices_per_mtok: tuple[float, float], prompt_tokens: float, completion_tokens: float,
               cached_tokens: float = 0, cached_per_mtok: float | None = None) -> float:
    """USD of a reply's usage at ``prices_per_mtok`` (prompt, completion). The
    ``cached_tokens`` are part of ``prompt_tokens`` and cost ``cached_per_mtok``
    instead of the prompt price; None: the prompt price (no discount assumed)."""
    cached = min(max(cached_tokens, 0), prompt_tokens)
    cached_rate = prices_per_mtok[0] if cached_per_mtok is None else cached_per_mtok
    return ((prompt_tokens - cached) * prices_per_mtok[0] + cached * cached_rate
            + completion_tokens * prices_per_mtok[1]) / 1_000_000


def attempt_tokens(request: JudgeRequest) -> int:
    """Tokens one attempt of ``request`` is assumed to use before its usage is known
    (what an account's token limit takes for it): its prompt's characters at
    :data:`CHARS_PER_TOKEN` plus :data:`COMPLETION_TOKENS_PER_CALL`."""
    chars = sum(len(str(message.get("content") or "")) for message in request.messages)
    return int(chars / CHARS_PER_TOKEN) + COMPLETION_TOKENS_PER_CALL


def reply_tokens(reply: JudgeReply, estimated: int) -> int:
    """The tokens a reply reported (prompt plus completion), or ``estimated`` when it reported none."""
    if reply.prompt_tokens is None and reply.completion_tokens is None:
        return estimated
    return int(reply.prompt_tokens or 0) + int(reply.completion_tokens or 0)


def attempt_estimate(prices_per_mtok: tuple[float, float] | None, request: JudgeRequest) -> float | None:
    """USD one attempt of ``request`` is assumed to cost when no usage came back."""
    if prices_per_mtok is None:
        return None
    chars = sum(len(str(message.get("content") or "")) for message in request.messages)
    prompt_tokens = chars / CHARS_PER_TOKEN
    return (prompt_tokens * prices_per_mtok[0] + COMPLETION_TOKENS_PER_CALL * prices_per_mtok[1]) / 1_000_000


class CallSpend:
    """What the attempts of one judge call have billed so far."""

    def __init__(self, model: str, prices_per_mtok: tuple[float, float] | None, request: JudgeRequest) -> None:
        self._prices, self._request = prices_per_mtok, request
        self.billed = Usage(model=model)

    @property
    def _estimate(self) -> float | None:
        # only needed when an attempt brought no usage back: most calls never ask
        return attempt_estimate(self._prices, self._request)

    @property
    def tokens(self) -> int:
        """Tokens one attempt of the call is assumed to use (:func:`attempt_tokens`)."""
        return attempt_tokens(self._request)

    def unanswered(self) -> None:
        """An attempt was sent and no usage came back: counted at its estimate."""
        self.billed.merge(Usage(calls=1, cost_usd=self._estimate))

    def answered(self, reply: JudgeReply) -> JudgeReply:
        """The reply of the call's last attempt, carrying every attempt's spend:
        its own usage priced (its estimate when it reported none) plus the
        earlier attempts'."""
        own = reply.cost_usd
        if own is None and reply.prompt_tokens is None and reply.completion_tokens is None:
            own = self._estimate
        cost = None if own is None and self.billed.cost_usd is None else (own or 0.0) + (self.billed.cost_usd or 0.0)
        return JudgeReply(
            content=reply.content, model=reply.model, prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens, cached_tokens=reply.cached_tokens, cost_usd=cost,
            latency_s=reply.latency_s, calls=self.billed.calls + 1,
        )
