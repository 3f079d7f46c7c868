"""A session's conversation as a session metric reads it, fitted to its size budget.

A session metric's ``ascore(input, output, context)`` gets the conversation as
``context``: a list of turns in order (``created_at``, then id), each
``{"input": ..., "output": ...}`` (judgeflow/db/sessions.py reads them). A
conversation longer than the budget (``JUDGEFLOW_SESSION_MAX_CHARS``, counted
in characters of turn text) keeps its first turn, which usually states what
the user came for, and as many of the latest turns as fit, which say how it
ended; the turns left out are replaced by one marker turn,
``{"note": "[N turns omitted]"}``, so the judge is told, inside the data,
that N turns are missing there. A turn
longer than the budget on its own is cut, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# what a cut text ends with (the judge sees that the turn goes on)
CUT_MARK = " [... cut: the turn is longer than the conversation's budget]"


@dataclass(frozen=True)
class Conversation:
    """The turns the judge sees, and what was left out to fit."""

    turns: list[dict[str, Any]]
    total: int  # turns the session had
    omitted: int = 0  # turns replaced by the marker
    cut: int = 0  # turns whose text was cut
    notes: dict[str, Any] = field(default_factory=dict)


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def _size(turn: dict[str, Any]) -> int:
    return len(turn["input"]) + len(turn["output"])


def _cut(turn: dict[str, Any], budget: int) -> dict[str, Any]:
    """``turn`` within ``budget`` characters: its input and output get half each (what one leaves, the other)."""
    half = max(budget // 2, 1)
    inp, out = turn["input"], turn["output"]
    if len(inp) > half and len(out) > half:
        inp, out = inp[:half] + CUT_MARK, out[:half] + CUT_MARK
    elif len(inp) > half:
        inp = inp[: max(budget - len(out), half)] + CUT_MARK
    else:
        out = out[: max(budget - len(inp), half)] + CUT_MARK
    return {"input": inp, "output": out}


def omitted_note(n: int) -> str:
    return f"[{n} turn{'' if n == 1 else 's'} omitted]"


def fit_conversation(raw: Sequence[Any], max_chars: int) -> Conversation:
    """The turns of ``raw`` (dicts with input and output; anything else is an empty turn) within
    ``max_chars``: the first turn, the elision marker, then the latest turns that fit."""
    turns = [{"input": _text(t.get("input")), "output": _text(t.get("output"))} if isinstance(t, dict)
             else {"input": "", "output": ""} for t in raw]
    total = len(turns)
    if sum(_size(t) for t in turns) <= max_chars:
        return Conversation(turns, total)
    cut = 0
    first = turns[0]
    if _size(first) > max_chars // 2:  # the first turn never takes more than half the budget
        first, cut = _cut(first, max_chars // 2), 1
    room = max_chars - _size(first)
    latest: list[dict[str, Any]] = []
    for turn in reversed(turns[1:]):
        if _size(turn) > room:
            if not latest and room > 0:  # the last turn alone is too long: cut it rather than show none
                latest.append(_cut(turn, room))
                cut += 1
            break
        latest.append(turn)
        room -= _size(turn)
    latest.reverse()
    omitted = total - 1 - len(latest)
    kept = [first, *([{"note": omitted_note(omitted)}] if omitted else []), *latest]
    return Conversation(kept, total, omitted=omitted, cut=cut,
                        notes={"turns_omitted": omitted, **({"turns_cut": cut} if cut else {})})
