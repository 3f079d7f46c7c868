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


def test_no_summary_in_a_command_list_is_cut():
    """A group's `--help` lists its commands, one line each: click cuts a summary past its column with "...";
    every one is shown whole at 80 columns (the command's summary, ending as it does)."""
    groups = [(path, c) for path, c in _commands(typer.main.get_command(app)) if hasattr(c, "commands")]
    assert len(groups) == 5  # judgeflow, db, alerts, phoenix, labels
    for path, group in groups:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)}, terminal_width=WIDTH)
        listed = result.output.split("Commands:\n", 1)[1].splitlines()
        assert len(listed) == len(group.commands), (path, listed)
        for line, (name, command) in zip(listed, group.commands.items()):
            assert len(line) <= WIDTH and not line.rstrip().endswith("..."), (path, line)
            assert line.split(None, 1) == [name, command.get_short_help_str(limit=1000)], (path, line)


def test_a_misused_command_is_one_line_naming_its_help_and_exits_2():
    """An unknown option or command, a bad value, a missing argument, an option without its value: one line
    (what is wrong, then the command's `--help`), exit 2, as gh and kubectl; not click's usage block."""
    cases = {
        ("score", "--bogus"): "judgeflow score: No such option: --bogus",
        ("results", "--limit", "many"): "judgeflow results: Invalid value for '--limit'",
        ("show",): "judgeflow show: Missing argument 'trace_id'.",
        ("report", "--segment"): "judgeflow report: Option '--segment' requires an argument.",
        ("nosuch",): "judgeflow: No such command 'nosuch'.",
        ("db", "upgrade", "--x"): "judgeflow db upgrade: No such option: --x",
        ("phoenix", "sync", "--bad"): "judgeflow phoenix sync: No such option: --bad",
        ("--bogus",): "judgeflow: No such option: --bogus",
    }
    for args, start in cases.items():
        result = runner.invoke(app, list(args), prog_name="judgeflow")
        assert result.exit_code == 2, (args, result.output)
        [line] = result.output.splitlines()
        command = start.split(":", 1)[0]
        assert line.startswith(start) and line.endswith(f"(see `{command} --help`)"), (args, line)
    # a group named alone still shows its help, as asked
    bare = runner.invoke(app, ["db"], prog_name="judgeflow")
    assert bare.output.startswith("Usage: judgeflow db"), bare.output
    assert "Commands:" in bare.output
