"""Terminal-safe output (judgeflow/cli/terminal_text.py): control characters from
untrusted text never reach the terminal as control characters."""

from __future__ import annotations

import io

import pytest

from judgeflow.cli.terminal_text import TerminalSafeStream, visible

OSC_TITLE = "\x1b]0;owned\x07"
OSC_LINK = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
CSI_CLEAR = "\x1b[2J\x1b[1A\x1b[2K"
C1_CSI = "\x9b31m"


def _controls(text: str) -> set[str]:
    return {c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F}


def test_visible_replaces_every_c0_and_c1_control_but_newline_and_tab():
    text = "a\tb\nc" + OSC_TITLE + OSC_LINK + CSI_CLEAR + C1_CSI + "\r\b\x00\x7f\x85"
    out = visible(text)
    assert _controls(out) == set()
    assert out.startswith("a\tb\nc␛]0;owned␇␛]8;;https://evil.example/␛\\click")
    assert "\ufffd31m" in out and out.endswith("␍␈␀␡\ufffd")
    assert visible("plain text, ünïcode ✓") == "plain text, ünïcode ✓"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("raw", [io.StringIO(), _Tty()], ids=["piped", "terminal"])
def test_the_stream_replaces_controls_written_through_it(raw):
    stream = TerminalSafeStream(raw)
    stream.write("reason: " + OSC_TITLE + OSC_LINK + CSI_CLEAR + C1_CSI + "\r\n")
    stream.flush()
    assert _controls(raw.getvalue()) == set()
    assert raw.getvalue().startswith("reason: ␛]0;owned␇")
    assert stream.isatty() == raw.isatty()


def test_on_a_terminal_colour_passes_and_nothing_else_does():
    raw = _Tty()
    stream = TerminalSafeStream(raw)
    stream.write("\x1b[31mjudgeflow: error\x1b[0m " + "\x1b[8mhidden\x1b[0m " + CSI_CLEAR)
    assert raw.getvalue() == "\x1b[31mjudgeflow: error\x1b[0m ␛[8mhidden\x1b[0m ␛[2J␛[1A␛[2K"
    raw = _Tty()
    TerminalSafeStream(raw).write("\x1b[38;5;8mgrey\x1b[0m \x1b[1;38;2;8;8;8mdark\x1b[0m \x1b[1;8m")
    assert raw.getvalue() == "\x1b[38;5;8mgrey\x1b[0m \x1b[1;38;2;8;8;8mdark\x1b[0m ␛[1;8m"
    piped = io.StringIO()
    TerminalSafeStream(piped).write("\x1b[31mred\x1b[0m")
    assert piped.getvalue() == "␛[31mred␛[0m"  # nothing of judgeflow's colours a pipe


def test_installing_twice_wraps_once():
    from judgeflow.cli.terminal_text import install

    class Holder:
        stdout = io.StringIO()
        stderr = io.StringIO()

    install(Holder)
    first = Holder.stdout
    install(Holder)
    assert Holder.stdout is first and isinstance(first, TerminalSafeStream)
    assert isinstance(Holder.stderr, TerminalSafeStream)
