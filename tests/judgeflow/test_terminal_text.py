"""Terminal-safe output (judgeflow/terminal_text.py): control characters from
untrusted text never reach the terminal as control characters."""

from __future__ import annotations

import io

import pytest

from judgeflow.terminal_text import TerminalSafeStream, visible

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
    # it says it is no terminal, so that nothing writes colour through it
    assert stream.isatty() is False
    from judgeflow.terminal_text import is_terminal

    assert is_terminal(stream) == raw.isatty()


def test_on_a_terminal_colour_is_replaced_like_any_other_sequence():
    """Colour from a trace (black on black) hides text: no SGR passes, on a terminal either."""
    raw = _Tty()
    stream = TerminalSafeStream(raw)
    stream.write("\x1b[31mjudgeflow: error\x1b[0m " + "\x1b[30;40mhidden\x1b[0m " + CSI_CLEAR)
    assert raw.getvalue() == "␛[31mjudgeflow: error␛[0m ␛[30;40mhidden␛[0m ␛[2J␛[1A␛[2K"
    piped = io.StringIO()
    TerminalSafeStream(piped).write("\x1b[31mred\x1b[0m")
    assert piped.getvalue() == "␛[31mred␛[0m"


def test_log_records_carry_no_control_character():
    import logging

    from judgeflow.config.scrub import install_log_scrubbing

    install_log_scrubbing()
    record = logging.getLogger("judgeflow.test").makeRecord(
        "judgeflow.test", logging.ERROR, __file__, 1, "judge said %s", ("\x1b[30;40mhidden" + OSC_TITLE,), None)
    assert _controls(record.getMessage()) == set() and "␛[30;40mhidden" in record.getMessage()


def test_installing_twice_wraps_once():
    from judgeflow.terminal_text import install

    class Holder:
        stdout = io.StringIO()
        stderr = io.StringIO()

    install(Holder)
    first = Holder.stdout
    install(Holder)
    assert Holder.stdout is first and isinstance(first, TerminalSafeStream)
    assert isinstance(Holder.stderr, TerminalSafeStream)
