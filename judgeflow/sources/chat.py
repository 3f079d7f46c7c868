"""A chat call as a reviewer reads it: the conversation up to the reply (the judged
input) and the reply's text (the judged output), or why there is nothing to judge.

Shared by the source presets (LiteLLM's spend logs and Phoenix's spans hold the same
OpenAI-style messages in different places). Everything here reads untrusted JSON: an
unexpected shape raises :class:`MalformedChat` with what was wrong, never anything else.

* **input**: the non-system turns, in order, each as ``role: text`` separated by a blank
  line; a conversation of one user turn is that turn's text alone. System (and
  ``developer``) messages are the app's instructions, neither what the user said nor
  evidence: they are left out (not sent to the judge, not used as hallucination context).
  An assistant turn that only called tools reads ``assistant: [called get_weather]``;
  a tool's answer reads ``tool: ...``.
* **images, audio, files** in a turn: the text parts are judged; each non-text part is
  replaced by a note such as ``[image not shown]``.
* **output**: the reply's text. A reply without text (only tool calls, or empty) is not
  judged: :func:`reply_text` says why (``skip``).
"""

from __future__ import annotations

import json
from typing import Any

SYSTEM_ROLES = ("system", "developer")


class MalformedChat(ValueError):
    """The stored messages or reply are not in the shape a chat call has."""


def part_text(content: Any) -> str:
    """A message's content as text: a string as is; a list of parts as its text parts
    joined by newlines, with a note per non-text part; None as ''."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
                continue
            if not isinstance(part, dict):
                raise MalformedChat(f"a content part is a {type(part).__name__}, not an object")
            kind = str(part.get("type") or "")
            if kind in ("text", "input_text", "output_text") or (not kind and "text" in part):
                text = part.get("text")
                if text is not None and not isinstance(text, str):
                    raise MalformedChat("a text part's text is not a string")
                texts.append(text or "")
            else:
                label = {"image_url": "image", "input_image": "image", "image": "image",
                         "input_audio": "audio", "audio": "audio", "file": "file", "input_file": "file"}
                texts.append(f"[{label.get(kind, kind or 'part')} not shown]")
        return "\n".join(t for t in texts if t)
    raise MalformedChat(f"message content is a {type(content).__name__}")


def _tool_names(calls: Any) -> list[str]:
    names = []
    if not isinstance(calls, list):
        return names
    for call in calls:
        if isinstance(call, dict):
            function = call.get("function") if isinstance(call.get("function"), dict) else call
            name = function.get("name") if isinstance(function, dict) else None
            names.append(str(name) if name else "a tool")
    return names


def conversation(messages: Any) -> str:
    """The judged input of a chat call (see the module doc)."""
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        raise MalformedChat(f"messages is a {type(messages).__name__}, not a list")
    turns: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, dict):
            raise MalformedChat(f"a message is a {type(message).__name__}, not an object")
        role = str(message.get("role") or "user")
        if role in SYSTEM_ROLES:
            continue
        text = part_text(message.get("content"))
        if not text and role == "assistant":
            names = _tool_names(message.get("tool_calls"))
            text = f"[called {', '.join(names)}]" if names else ""
        turns.append((role, text))
    if not turns:
        return ""
    if len(turns) == 1 and turns[0][0] == "user":
        return turns[0][1]
    return "\n\n".join(f"{role}: {text}" for role, text in turns)


def reply_text(message: Any) -> tuple[str | None, str | None]:
    """``(output, None)`` for a reply with text, ``(None, why)`` for one without."""
    if not isinstance(message, dict):
        raise MalformedChat(f"the reply is a {type(message).__name__}, not a message object")
    text = part_text(message.get("content"))
    if text.strip():
        return text, None
    names = _tool_names(message.get("tool_calls")) or _tool_names(
        [message["function_call"]] if isinstance(message.get("function_call"), dict) else None
    )
    if names:
        return None, f"the reply is a tool call ({', '.join(names)}) with no text to judge"
    if message.get("refusal"):
        return str(message["refusal"]), None
    return None, "the reply is empty: no text to judge"


def loads(value: Any) -> Any:
    """A JSON column's value: already decoded by the driver; a string holding JSON
    (a document stored twice encoded) is decoded once more, any other string kept."""
    if isinstance(value, (bytes, str)):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
