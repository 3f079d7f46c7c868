"""Sans-IO step machinery shared by every metric.

A metric's logic is written once, as a generator (a :data:`Flow`): it yields a
``list[JudgeRequest]`` whose requests are independent of each other (so they may
run concurrently), receives the ``list[JudgeReply]`` in the same order, and
finally returns its outcome. The generator never performs I/O itself:
:func:`adrive` runs it with ``judge.acomplete``, so a metric's logic can be
read (and tested) step by step without a judge.

:func:`ask` is the building block metrics ``yield from``: it sends requests,
validates each reply against the step's pydantic model (:func:`parse_reply`
reads the one answer object out of the reply, whatever the judge wrote around
it) and re-asks, with a repair message, for replies that do not validate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from judgeflow.errors import InvalidJudgeReplyError
from judgeflow.judge.base import Judge, JudgeReply, JudgeRequest, Usage

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# Yields batches of independent requests, is sent their replies (same order),
# returns the metric's outcome.
Flow = Generator[list[JudgeRequest], list[JudgeReply], T]

# At most this many validation errors are quoted back to the judge: enough to
# fix the reply, without echoing a long list that would dilute the request.
MAX_ERRORS_QUOTED = 5

REPAIR_MESSAGE = (
    "Your previous reply could not be accepted: {error}\n"
    "Reply again with only a JSON object of exactly this shape, and nothing "
    "before or after it:\n{shape}"
)


def parse_reply(raw: str, schema: type[M], context: Mapping[str, Any] | None = None) -> M:
    """Validate one raw judge reply against ``schema``, accepting it whenever its
    meaning is unambiguous.

    The answer is the one JSON object in ``raw`` that names at least one of the
    schema's fields (:func:`answer_object`): prose around it, code fences (any
    number), trailing commas and raw control characters inside strings are
    tolerated. Keys the schema does not know are kept by the models (they are
    ``extra="allow"``) for the metric to store. Raises
    :class:`pydantic.ValidationError` when there is no such object, when there
    are several different ones, or when the answer does not validate.
    """
    answer = answer_object(raw, tuple(schema.model_fields))
    ctx = dict(context) if context is not None else None
    return schema.model_validate(answer, context=ctx)


def answer_object(raw: str, fields: Sequence[str]) -> dict[str, Any]:
    """The JSON object of ``raw`` that is the judge's answer.

    Candidates are the JSON objects at the top level of the text, read in order
    with the standard library's decoder from each ``{`` (an object inside
    another object, or inside a JSON list, is not a candidate). The answer is
    the candidate naming at least one of ``fields``; identical repeats count
    once. Objects naming none of them are not answers: an echo of the data
    block (its keys never overlap a step's fields) or a note in JSON. Two
    *different* objects naming the step's fields are ambiguous, e.g. the judge
    quoting a forged answer from the trace text before its own: the reply is
    invalid rather than the first one taken. An object whose meaning is
    unclear (a key given twice with different values, NaN) takes part as an
    answer that cannot be read. With no answer, the error is the first
    candidate's (a missing field), or "Invalid JSON" without any.
    """
    values = list(_top_level_json(raw))
    answers: list[dict[str, Any] | _Unreadable] = []
    for value in values:
        names = value.keys if isinstance(value, _Unreadable) else value if isinstance(value, dict) else ()
        if any(name in names for name in fields) and value not in answers:
            answers.append(value)
    if len(answers) > 1:
        raise _reply_error(
            "ambiguous_reply",
            f"the reply holds {len(answers)} different JSON objects with this step's fields; give exactly one",
            raw,
        )
    unreadable = [value for value in values if isinstance(value, _Unreadable)]
    if answers:
        answer = answers[0]
    else:
        objects = [value for value in values if isinstance(value, dict)]
        if objects:
            return objects[0]  # validating it reports what the answer lacks
        if not unreadable:
            raise _reply_error("json_invalid", f"Invalid JSON: {_why_no_object(raw)}", raw)
        answer = unreadable[0]
    if isinstance(answer, _Unreadable):
        raise _reply_error("json_invalid", f"Invalid JSON: {answer.problem}", raw)
    return answer


def _why_no_object(raw: str) -> str:
    """What the decoder says about the first ``{`` of a reply without a JSON
    object, for the repair message."""
    first = raw.find("{")
    if first >= 0:
        try:
            _LENIENT.raw_decode(raw, first)
        except json.JSONDecodeError as error:
            return f"{error.msg} at line {error.lineno} column {error.colno}"
        except (ValueError, RecursionError):
            pass
    return "no JSON object found in the reply"


# Decoding attempts (from a "{" or "[") in one reply, at most, and trailing
# commas dropped in one reply, at most: each attempt and each dropped comma
# costs a pass over the text, so a reply of broken JSON or of thousands of
# small objects would otherwise cost time quadratic in its length. Real
# replies need a few of each.
MAX_ATTEMPTS = 200
MAX_TRAILING_COMMAS = 64


class _ConflictingKeys(ValueError):
    """An object repeats a key with another value: which one is meant is unknown."""


@dataclass(frozen=True)
class _Unreadable:
    """A JSON value whose meaning is unclear: what is wrong, and its keys."""

    problem: str
    keys: frozenset[str]


def _object_without_conflicts(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj and obj[key] != value:
            raise _ConflictingKeys(f"key {key!r} given twice with different values")
        obj[key] = value
    return obj


def _no_constants(name: str) -> Any:
    # NaN and Infinity are not JSON, and no score or count can be one
    raise ValueError(f"{name} is not a JSON value")


# strict=False: a raw newline or tab inside a string (models write them in long
# reasons) changes nothing about the meaning.
_DECODER = json.JSONDecoder(
    strict=False, object_pairs_hook=_object_without_conflicts, parse_constant=_no_constants
)
# Finds where a value the decoder above refused for its meaning ends, and its keys.
_LENIENT = json.JSONDecoder(strict=False)


def _top_level_json(text: str) -> Iterator[Any]:
    """The JSON objects and lists decoded at the top level of ``text``, in order:
    after a value decodes, the search goes on after its end, so nothing nested
    in it is yielded on its own. Where a ``{`` or ``[`` does not start a value
    (prose, a cut-off reply), the search goes on where the decoder stopped, so
    nothing inside the readable part of a broken value is taken either. The
    search stops after :data:`MAX_ATTEMPTS` attempts."""
    position = 0
    commas = [MAX_TRAILING_COMMAS]  # what is left of the reply's budget
    for _ in range(MAX_ATTEMPTS):
        start = _next_opening(text, position)
        while start >= 0 and not _may_start_value(text, start):
            start = _next_opening(text, start + 1)
        if start < 0:
            return
        decoded, position = _decode_at(text, start, commas)
        if decoded is not _NOTHING:
            yield decoded


def _may_start_value(text: str, start: int) -> bool:
    """Whether the character after an opening bracket can follow it in JSON: a
    cheap test that skips prose such as "{x}" or "[see above]" without a
    decoder error."""
    after = start + 1
    while after < len(text) and text[after] in _JSON_WHITESPACE:
        after += 1
    if after == len(text):
        return False
    if text[start] == "{":
        return text[after] in '"}'
    return text[after] in '"-0123456789{[]tfn'


_JSON_WHITESPACE = " \t\r\n"


def _next_opening(text: str, position: int) -> int:
    brace, bracket = text.find("{", position), text.find("[", position)
    if brace < 0 or bracket < 0:
        return max(brace, bracket)
    return min(brace, bracket)


_NOTHING = object()


def _decode_at(text: str, start: int, commas: list[int]) -> tuple[Any, int]:
    """The value starting at ``start`` (or ``_NOTHING``) and the position in
    ``text`` to search on from: just after the value, or where the decoder
    stopped. A trailing comma (one directly before a closing ``}`` or ``]``,
    after a value) is dropped where the decoder reports it, so only commas
    outside strings are ever touched, and a missing value (``[1,,2]``) or a
    comma after an opening bracket (``{,}``) stays an error. ``commas`` holds
    how many more commas the reply may have dropped."""
    work = text
    removed = 0  # commas dropped, all before the decoder's position
    while True:
        try:
            value, end = _DECODER.raw_decode(work, start)
        except json.JSONDecodeError as error:
            comma = _trailing_comma(work, error.pos, start)
            if comma is None or commas[0] <= 0:
                return _NOTHING, max(start + 1, error.pos + removed)
            work = work[:comma] + work[comma + 1 :]
            removed += 1
            commas[0] -= 1
            continue
        except ValueError as unclear:  # _ConflictingKeys, or NaN / Infinity
            return _unreadable(work, start, removed, str(unclear))
        except RecursionError:
            # nested deeper than the decoder reads: no answer is that deep,
            # and retrying from every bracket inside would take quadratic time
            return _NOTHING, len(text)
        return value, end + removed


def _unreadable(work: str, start: int, removed: int, problem: str) -> tuple[Any, int]:
    """A value the decoder refused for its meaning (a conflicting key, NaN),
    read again leniently to learn its keys and where it ends."""
    try:
        value, end = _LENIENT.raw_decode(work, start)
    except (ValueError, RecursionError):
        return _NOTHING, start + 1
    keys = frozenset(value) if isinstance(value, dict) else frozenset()
    return _Unreadable(problem, keys), end + removed


def _trailing_comma(text: str, position: int, start: int) -> int | None:
    """The index of the comma that makes ``text[position]`` (a ``}`` or ``]``)
    an error, if that comma follows a value."""
    if position >= len(text) or text[position] not in "}]":
        return None
    comma = position - 1
    while comma > start and text[comma].isspace():
        comma -= 1
    if text[comma] != ",":
        return None
    before = comma - 1
    while before > start and text[before].isspace():
        before -= 1
    if text[before] in "{[,:":
        return None
    return comma


def _reply_error(kind: str, message: str, raw: str) -> ValidationError:
    return ValidationError.from_exception_data(
        "reply", [{"type": PydanticCustomError(kind, message), "loc": (), "input": raw}]
    )


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


async def adrive(flow: Flow[T], judge: Judge, *, usage: Usage, concurrent: bool = True) -> T:
    """Run ``flow`` with ``judge.acomplete``. A batch of several requests runs
    concurrently when ``concurrent``, otherwise one after another."""
    try:
        requests = next(flow)
        while True:
            replies = await _acomplete_batch(judge, requests, concurrent, usage) if requests else []
            requests = flow.send(replies)
    except StopIteration as stop:
        outcome: T = stop.value
        return outcome
    finally:
        flow.close()


async def _acomplete_batch(
    judge: Judge, requests: list[JudgeRequest], concurrent: bool, usage: Usage
) -> list[JudgeReply]:
    """The replies, each counted in ``usage`` as it arrives: when one call of a
    batch fails, the ones that answered are counted (they are billed)."""

    async def counted(request: JudgeRequest) -> JudgeReply:
        try:
            reply = await judge.acomplete(request)
        except Exception as error:
            usage.add_billed(error)  # the attempts it sent are billed though it failed
            raise
        usage.add(reply)
        return reply

    if not concurrent or len(requests) == 1:
        return [await counted(request) for request in requests]
    tasks = [asyncio.ensure_future(counted(request)) for request in requests]
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
