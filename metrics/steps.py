"""Sans-IO step machinery shared by every metric.

A metric's logic is written once, as a generator (a :data:`Flow`): it yields a
``list[JudgeRequest]`` whose requests are independent of each other (so they may
run concurrently), receives the ``list[JudgeReply]`` in the same order, and
finally returns its outcome. The generator never performs I/O itself, which is
what lets :func:`drive` (sync, ``judge.complete``) and :func:`adrive` (async,
``judge.acomplete``) share one code path instead of two copies of each metric.

:func:`ask` is the building block metrics ``yield from``: it sends requests,
validates each reply against the step's pydantic model and re-asks, with a
repair message, for replies that do not validate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Generator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from judgeflow.errors import InvalidJudgeReplyError
from judgeflow.judge.base import Judge, JudgeReply, JudgeRequest

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# Yields batches of independent requests, is sent their replies (same order),
# returns the metric's outcome.
Flow = Generator[list[JudgeRequest], list[JudgeReply], T]

# Upper bound on threads the sync driver uses for one batch. The judge owns the
# real bound on calls in flight; this only keeps a large batch from spawning
# one thread per request.
MAX_THREADS = 8

# At most this many validation errors are quoted back to the judge: enough to
# fix the reply, without echoing a long list that would dilute the request.
MAX_ERRORS_QUOTED = 5

REPAIR_MESSAGE = (
    "Your previous reply could not be accepted: {error}\n"
    "Reply again with only a JSON object of exactly this shape, and nothing "
    "before or after it:\n{shape}"
)


def parse_reply(raw: str, schema: type[M], context: Mapping[str, Any] | None = None) -> M:
    """Validate one raw judge reply against ``schema``.

    A single surrounding Markdown code fence is removed first: models often wrap
    JSON in one, and re-asking for that alone would cost a call for nothing.
    Raises :class:`pydantic.ValidationError` (also for text that is not JSON).
    """
    text = _strip_code_fence(raw)
    ctx = dict(context) if context is not None else None
    try:
        return schema.model_validate_json(text, context=ctx)
    except ValidationError as error:
        # pydantic's JSON parser refuses lone UTF-16 surrogates, which models do
        # emit; the JSON standard library reads them. The reply is otherwise
        # fine: the surrogates are replaced where the result is stored.
        if not _SURROGATE.search(text):
            raise
        try:
            data = json.loads(text)
        except ValueError:
            raise error from None
        return schema.model_validate(data, context=ctx)


_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def describe_error(error: ValidationError) -> str:
    """A compact description of what was wrong, for the repair message and the
    exception. The offending values are left out on purpose: they came from the
    judge and may be long."""
    parts = []
    for item in error.errors()[:MAX_ERRORS_QUOTED]:
        where = ".".join(str(part) for part in item["loc"]) or "reply"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - MAX_ERRORS_QUOTED
    if more > 0:
        parts.append(f"and {more} more error(s)")
    return "; ".join(parts)


def repair_request(request: JudgeRequest, raw: str, error: str, shape: str) -> JudgeRequest:
    """The same request with the invalid reply and a correction appended, so the
    judge sees what it said and what was wrong with it."""
    messages = [
        *request.messages,
        {"role": "assistant", "content": raw},
        {"role": "user", "content": REPAIR_MESSAGE.format(error=error, shape=shape)},
    ]
    return dataclasses.replace(request, messages=messages)


def ask(
    requests: Sequence[JudgeRequest],
    schema: type[M],
    *,
    context: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
    shape: str | None = None,
    max_repairs: int = 2,
) -> Generator[list[JudgeRequest], list[JudgeReply], list[M]]:
    """Send ``requests`` together and return one validated ``schema`` per request.

    ``context`` is the pydantic validation context: one mapping for every
    request, or a sequence with one entry per request (e.g. the expected
    verdict count of each batch). ``shape`` is the JSON shape restated in the
    repair message (defaults to the schema's JSON schema).

    Invalid replies are re-asked, all still-invalid ones together, at most
    ``max_repairs`` times; then :class:`InvalidJudgeReplyError` is raised with
    the last raw reply.
    """
    contexts = _per_request(context, len(requests))
    shape_text = shape if shape is not None else str(schema.model_json_schema())
    pending: dict[int, JudgeRequest] = dict(enumerate(requests))
    parsed: dict[int, M] = {}
    attempts = 0
    while pending:
        attempts += 1
        order = list(pending)
        replies = yield [pending[i] for i in order]
        if len(replies) != len(order):
            raise RuntimeError(f"driver sent {len(replies)} replies for {len(order)} requests")
        still_invalid: dict[int, JudgeRequest] = {}
        for i, reply in zip(order, replies, strict=True):
            try:
                parsed[i] = parse_reply(reply.content, schema, contexts[i])
            except ValidationError as error:
                described = describe_error(error)
                if attempts > max_repairs:
                    step = pending[i].step
                    raise InvalidJudgeReplyError(
                        f"{step}: judge reply still invalid after {attempts} attempt(s): {described}",
                        step=step,
                        raw=reply.content,
                        attempts=attempts,
                    ) from error
                still_invalid[i] = repair_request(pending[i], reply.content, described, shape_text)
        pending = still_invalid
    return [parsed[i] for i in range(len(requests))]


@dataclass
class Usage:
    """What the judge calls of one metric run cost, accumulated by the drivers.

    ``cost_usd`` sums the known costs and stays None only while no reply had a
    known cost: a partly known cost is still a useful lower bound, while 0.0
    for "unknown" would be a lie. ``model`` is the model the last reply named
    (it may be more specific than the configured one, e.g. a dated snapshot).
    """

    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    calls: int = 0

    def add(self, reply: JudgeReply) -> None:
        self.calls += 1
        self.model = reply.model or self.model
        self.prompt_tokens += reply.prompt_tokens or 0
        self.completion_tokens += reply.completion_tokens or 0
        if reply.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + reply.cost_usd


def drive(flow: Flow[T], judge: Judge, *, usage: Usage, concurrent: bool = True) -> T:
    """Run ``flow`` with ``judge.complete``. A batch of several requests runs in
    a small thread pool when ``concurrent``, otherwise one after another."""
    try:
        requests = next(flow)
        while True:
            replies = _complete_batch(judge, requests, concurrent) if requests else []
            for reply in replies:
                usage.add(reply)
            requests = flow.send(replies)
    except StopIteration as stop:
        outcome: T = stop.value
        return outcome
    finally:
        flow.close()


async def adrive(flow: Flow[T], judge: Judge, *, usage: Usage, concurrent: bool = True) -> T:
    """Run ``flow`` with ``judge.acomplete``. A batch of several requests runs
    concurrently when ``concurrent``, otherwise one after another (the same
    meaning as in :func:`drive`)."""
    try:
        requests = next(flow)
        while True:
            replies = await _acomplete_batch(judge, requests, concurrent) if requests else []
            for reply in replies:
                usage.add(reply)
            requests = flow.send(replies)
    except StopIteration as stop:
        outcome: T = stop.value
        return outcome
    finally:
        flow.close()


def _complete_batch(judge: Judge, requests: list[JudgeRequest], concurrent: bool) -> list[JudgeReply]:
    if not concurrent or len(requests) == 1:
        return [judge.complete(request) for request in requests]
    with ThreadPoolExecutor(max_workers=min(len(requests), MAX_THREADS)) as pool:
        return list(pool.map(judge.complete, requests))


async def _acomplete_batch(judge: Judge, requests: list[JudgeRequest], concurrent: bool) -> list[JudgeReply]:
    if not concurrent or len(requests) == 1:
        return [await judge.acomplete(request) for request in requests]
    tasks = [asyncio.ensure_future(judge.acomplete(request)) for request in requests]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        # One call failed (or we were cancelled): the others' answers are no
        # longer needed, so stop paying for them.
        for task in tasks:
            task.cancel()
        raise


def _per_request(
    context: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None, count: int
) -> list[Mapping[str, Any] | None]:
    if context is None or isinstance(context, Mapping):
        return [context] * count
    contexts = list(context)
    if len(contexts) != count:
        raise ValueError(f"got {len(contexts)} validation contexts for {count} requests")
    return contexts


def _strip_code_fence(raw: str) -> str:
    text = raw.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        body = text[3:-3]
        # Drop an info string such as ```json on the opening line.
        first_newline = body.find("\n")
        if first_newline != -1 and body[:first_newline].strip().isalnum():
            body = body[first_newline + 1 :]
        return body.strip()
    return text
