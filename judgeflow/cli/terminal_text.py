"""Text that is safe to print: no control character written by someone else
(a judge's reply, a trace, a receiver's error) reaches the terminal as one.

Trace content can steer what a judge writes, and judges' replies are printed
by `judgeflow show`, `judgeflow shadow` and others: an OSC sequence could set
the window title, plant a hyperlink or write the clipboard, a CSI sequence
could move the cursor and overwrite lines. ``visible`` replaces each C0
control character except newline and tab with its Unicode control picture
(ESC becomes ``␛``), DEL with ``␡`` and each C1 control character with
U+FFFD. ``install`` wraps ``sys.stdout`` and ``sys.stderr`` once (the CLI's
``main``), so every command's output goes through it, typer's, click's and
Prefect's log lines included.

One exception, on a terminal only: colour and weight (SGR sequences, ``ESC [
digits ; ... m``, without the "conceal" attribute) pass, because typer, click
and Prefect's log handler colour their own lines that way. Nothing colours a
pipe, so there every sequence is replaced. The live progress display draws with
cursor moves; it writes to ``TerminalSafeStream.unfiltered`` and prints only
judgeflow's own figures.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab (09) and newline (0a)
# ESC [ params m: colour and weight; "8" (conceal) hides text, so it is not let through
_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block: U+2400 NUL ... U+241F US
    if code == 0x7F:
        return "\u2421"  # ␡
    return "\ufffd"


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab replaced by a visible one."""
    return _CONTROL.sub(_picture, text)


def _colour_only(params: str) -> bool:
    """No "conceal" (8) among the SGR attributes; 38/48/58 take a colour as 5;n or 2;r;g;b, skipped."""
    parts, i = params.split(";"), 0
    while i < len(parts):
        if parts[i] in ("38", "48", "58"):
            i += {"5": 3, "2": 5}.get(parts[i + 1] if i + 1 < len(parts) else "", 1)
            continue
        if parts[i] == "8":
            return False
        i += 1
    return True


def visible_but_colour(text: str) -> str:
    """Like :func:`visible`, but SGR colour sequences pass (for a terminal)."""
    out, start = [], 0
    for match in _SGR.finditer(text):
        if _colour_only(match.group(1)):
            out.append(visible(text[start:match.start()]))
            out.append(match.group(0))
            start = match.end()
    out.append(visible(text[start:]))
    return "".join(out)


class TerminalSafeStream:
    """A text stream that writes through :func:`visible` (or :func:`visible_but_colour`
    when the stream it wraps is a terminal) and delegates everything else."""

    def __init__(self, stream: TextIO):
        self.unfiltered = stream
        self._clean = visible_but_colour if _is_terminal(stream) else visible

    def write(self, text: str) -> int:
        self.unfiltered.write(self._clean(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def isatty(self) -> bool:
        return _is_terminal(self.unfiltered)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding, buffer, ...
        return getattr(self.unfiltered, name)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def install(target: Any = sys) -> None:
    """Wrap ``target.stdout`` and ``target.stderr`` (``sys``'s by default), once."""
    for name in ("stdout", "stderr"):
        stream = getattr(target, name)
        if stream is not None and not isinstance(stream, TerminalSafeStream):
            setattr(target, name, TerminalSafeStream(stream))


def unfiltered(stream: TextIO) -> TextIO:
    """The stream under a :class:`TerminalSafeStream` (for a display that draws with cursor moves)."""
    return stream.unfiltered if isinstance(stream, TerminalSafeStream) else stream
