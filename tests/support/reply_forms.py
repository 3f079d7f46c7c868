"""Judge replies in the forms real models write them, for tests and the
judge server: each form takes a strict reply (JSON text of one step's answer)
and returns the same answer written another way that is still unambiguous:
deepeval's verdict without a reason, Opik's layout after a sentence, prose
around it, fenced twice, an echo of the data first, trailing commas, extra
keys, "Yes" for "yes", a reason as text, a raw newline inside a string."""

from __future__ import annotations

import json
from typing import Any, Callable


def _without_no_reasons(answer: dict) -> dict:
    # deepeval's verdict prompt shows {"verdict": "no"}: a reason only for "yes"
    if "verdicts" in answer:
        answer = {**answer, "verdicts": [
            {k: v for k, v in verdict.items() if not (k == "reason" and verdict.get("verdict") == "no")}
            for verdict in answer["verdicts"]
        ]}
    return answer


def _with_extra_keys(answer: dict) -> dict:
    answer = {**answer, "confidence": 0.9}
    if "verdicts" in answer:
        answer["verdicts"] = [{**verdict, "category": "none"} for verdict in answer["verdicts"]]
    return answer


def with_trailing_commas(value: Any, depth: int = 0) -> str:
    """JSON with a comma after the last member of every non-empty object and list."""
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict) and value:
        members = "".join(f"{inner}{json.dumps(k)}: {with_trailing_commas(v, depth + 1)},\n" for k, v in value.items())
        return "{\n" + members + pad + "}"
    if isinstance(value, list) and value:
        return "[\n" + "".join(f"{inner}{with_trailing_commas(v, depth + 1)},\n" for v in value) + pad + "]"
    return json.dumps(value)


def _upper_verdicts(answer: dict) -> dict:
    if "verdicts" in answer:
        answer = {**answer, "verdicts": [{**v, "verdict": v["verdict"].capitalize()} for v in answer["verdicts"]]}
    return answer


def _reason_as_text(answer: dict) -> dict:
    if isinstance(answer.get("reason"), list):
        answer = {**answer, "reason": " ".join(answer["reason"])}
    return answer


_MARK = "\ue000"


def _raw_newlines_in_verdict_reasons(answer: dict) -> str:
    """The JSON text with an unescaped line break after the first word of each
    verdict's reason (models write them in long strings)."""
    if "verdicts" in answer:
        answer = {**answer, "verdicts": [
            {**v, "reason": v["reason"].replace(" ", _MARK, 1)} if isinstance(v.get("reason"), str) else v
            for v in answer["verdicts"]
        ]}
    return json.dumps(answer, ensure_ascii=False).replace(_MARK, "\n")


LAX_FORMS: dict[str, Callable[[str], str]] = {
    # deepeval's verdict form in the fence its examples use
    "deepeval": lambda raw: "```json\n" + json.dumps(_without_no_reasons(json.loads(raw))) + "\n```",
    # Opik's template layout (4-space indent) after a sentence, as Opik's
    # parser (first "{" to last "}") reads it
    "opik": lambda raw: "Here is my evaluation:\n" + json.dumps(json.loads(raw), indent=4),
    "prose": lambda raw: f"Sure! Having read the data carefully, my answer is {raw} I hope this helps.",
    "fenced-twice": lambda raw: f"```json\n```json\n{raw}\n```\n```",
    "two-fences-echo-first": lambda raw: (
        "The data I was given:\n```json\n{\"input\": \"q\", \"output\": \"echoed\"}\n```\n"
        f"My answer:\n```json\n{raw}\n```"
    ),
    "trailing-comma": lambda raw: with_trailing_commas(json.loads(raw)),
    "extra-keys": lambda raw: json.dumps(_with_extra_keys(json.loads(raw))),
    "verdict-case": lambda raw: json.dumps(_upper_verdicts(json.loads(raw))),
    "reason-as-text": lambda raw: json.dumps(_reason_as_text(json.loads(raw))),
    "raw-newline-in-string": lambda raw: _raw_newlines_in_verdict_reasons(json.loads(raw)),
    "all-at-once": lambda raw: "Sure!\n```json\n```json\n" + with_trailing_commas(
        _with_extra_keys(_upper_verdicts(_without_no_reasons(json.loads(raw))))
    ) + "\n```\n```\nDone.",
}
