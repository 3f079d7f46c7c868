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

No exception for colour, on a terminal either: a trace or a judge's reply can
carry colour codes as well as anything else (black on black hides text). The
wrapped streams say they are not terminals (``isatty()`` is False), so typer,
click, rich and Prefect's log handler write no colour of their own there; the
live progress display draws with cursor moves on ``TerminalSafeStream.unfiltered``
and prints only judgeflow's own figures. Judge worker processes wrap their
streams the same way (``judgeflow.judge.pool.worker``), and every log record's
text goes through :func:`visible` where it is made (``judgeflow.config.scrub``).
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab (09) and newline (0a)


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


class TerminalSafeStream:
    """A text stream that writes through :func:`visible` and delegates everything
    else, but says it is no terminal (see the module doc)."""

    def __init__(self, stream: TextIO):
        self.unfiltered = stream

    def write(self, text: str) -> int:
        self.unfiltered.write(visible(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def isatty(self) -> bool:
        return False  # so that nothing writes colour codes through it

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding, buffer, ...
        return getattr(self.unfiltered, name)


def is_terminal(stream: TextIO) -> bool:
    """Whether what ``stream`` writes to (under a :class:`TerminalSafeStream`) is a terminal."""
    try:
        return bool(unfiltered(stream).isatty())
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
