"""Every command's `--help` fits 80 columns and cuts no word of its help."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from judgeflow.cli import app

runner = CliRunner()
WIDTH = 80


def _commands(command, path: tuple[str, ...] = ()):
    yield path, command
    if hasattr(command, "commands"):  # a group (typer's own click, not the installed one)
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


def _words(text: str | None) -> set[str]:
    return set(re.findall(r"[A-Za-z0-9_][\w'./=-]*[\w]", text or ""))


def test_every_help_fits_80_columns_and_cuts_no_word():
    commands = list(_commands(typer.main.get_command(app)))
    assert len(commands) > 20  # every command and group, the subcommands included
    for path, command in commands:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)}, terminal_width=WIDTH)
        assert result.exit_code == 0, (path, result.output)
        lines = result.output.splitlines()
        wide = [line for line in lines if len(line) > WIDTH]
        assert not wide, (path, wide)
        assert "…" not in result.output, (path, result.output)  # nothing cut off
        shown = set(re.findall(r"[\w'./=-]+", result.output))
        declared = _words(command.help) | {w for p in command.params for w in _words(getattr(p, "help", None))}
        cut = {w for w in declared if not any(w in token for token in shown)}
        assert not cut, (path, sorted(cut))


def test_options_that_take_a_value_say_what_it_is():
    for path, command in _commands(typer.main.get_command(app)):
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                assert getattr(param, "help", None), (path, param.name)
