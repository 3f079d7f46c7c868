"""Docs that stay true: the settings reference lists every field of the settings
object with its real default, every command the README shows exists, and every
relative link in the README and docs/ leads to a file (and heading) that exists.

These read the repository's own files, so a setting added without its line in
docs/settings.md, or a README command renamed in the CLI, fails here."""

from __future__ import annotations

import enum
import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SETTINGS_PAGE = DOCS / "settings.md"
README_MAX_LINES = 200

FENCE = re.compile(r"^\s*```")
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}


# --- markdown helpers ------------------------------------------------------------


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced code block."""
    blocks, lang, lines = [], None, []
    for line in text.splitlines():
        if FENCE.match(line):
            if lang is None:
                lang, lines = line.strip()[3:].strip().lower(), []
            else:
                blocks.append((lang, lines))
                lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            out.append(line)
    return out


def tables(text: str) -> list[list[list[str]]]:
    """Every pipe table outside code blocks, as rows of stripped cells (header first,
    separator row dropped)."""
    found, current = [], []
    for line in prose_lines(text) + [""]:
        if line.lstrip().startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text()):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = github_slug(match.group(1))
            n = seen.get(slug, 0)
            out.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
    return out


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


# --- settings reference ----------------------------------------------------------


def documented_settings(page: Path) -> dict[str, str]:
    """JUDGEFLOW_ variable -> its default cell, from every table of the page that has
    a 'variable' and a 'default' column."""
    documented: dict[str, str] = {}
    for table in tables(page.read_text()):
        header = [cell.lower() for cell in table[0]]
        rows = table[1:]
        names = [re.fullmatch(r"`(JUDGEFLOW_[A-Z0-9_]+)`", row[0]) for row in rows if row]
        if not any(names) or "default" not in header:
            continue  # other tables (e.g. examples of secret references) are not the reference
        column = header.index("default")
        for row, name in zip(rows, names):
            if name:
                assert name.group(1) not in documented, f"{name.group(1)} is documented twice in {page.name}"
                documented[name.group(1)] = row[column]
    return documented


def env_name(name: str, field) -> str:
    alias = field.validation_alias if isinstance(field.validation_alias, str) else None
    return (alias or f"JUDGEFLOW_{name}").upper()


def default_matches(cell: str, value) -> bool:
    """Whether a default cell shows `value`: 'unset ...' for None (or empty), else the
    first `code span` rendered the way one writes it in the environment."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or value == "" or value == [] or value == ():
        return cell.lower().startswith("unset")
    spans = re.findall(r"`([^`]*)`", cell)
    if not spans or cell.lower().startswith("unset"):
        return False
    shown = spans[0].strip()
    if isinstance(value, bool):
        return shown.lower() == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return float(shown.replace(",", "").replace("_", "")) == float(value)
        except ValueError:
            return False
    if isinstance(value, Path):
        return shown.rstrip("/") in (str(value), value.as_posix())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [part.strip() for part in shown.split(",")] == [str(item) for item in value]
    return shown == str(value)


def settings_problems(page: Path) -> list[str]:
    from judgeflow.config.settings import setting_fields

    documented = documented_settings(page)
    problems = []
    expected = {}
    for name, field in setting_fields().items():
        variable = env_name(name, field)
        expected[variable] = field
        value = field.get_default(call_default_factory=True)
        if variable not in documented:
            problems.append(f"{variable} (Settings.{name}, default {value!r}) is not documented in {page.name}")
        elif not default_matches(documented[variable], value):
            problems.append(
                f"{variable}: {page.name} says the default is {documented[variable]!r}, the code says {value!r}"
            )
    for variable in documented:
        if variable not in expected:
            problems.append(f"{page.name} documents {variable}, which is not a field of Settings")
    return problems


def test_every_setting_is_documented_with_its_default():
    problems = settings_problems(SETTINGS_PAGE)
    assert not problems, "docs/settings.md is out of date:\n" + "\n".join(problems)


def test_the_settings_check_fails_on_an_undocumented_or_wrong_setting(tmp_path):
    """The check above can fail: drop one row and change one default in a copy."""
    text = SETTINGS_PAGE.read_text()
    dropped = "\n".join(line for line in text.splitlines() if not line.startswith("| `JUDGEFLOW_MAX_CONCURRENCY`"))
    wrong = dropped.replace("| `JUDGEFLOW_JUDGE_TIMEOUT_S` | `60` |", "| `JUDGEFLOW_JUDGE_TIMEOUT_S` | `61` |")
    wrong = wrong.replace("| `JUDGEFLOW_HOME` | `.judgeflow` |", "| `JUDGEFLOW_HOME` | unset |")
    wrong += "\n\n| variable | default | meaning |\n|---|---|---|\n| `JUDGEFLOW_NO_SUCH_THING` | `1` | gone |\n"
    page = tmp_path / "settings.md"
    page.write_text(wrong)
    problems = "\n".join(settings_problems(page))
    assert "JUDGEFLOW_MAX_CONCURRENCY (Settings.max_concurrency" in problems
    assert "JUDGEFLOW_JUDGE_TIMEOUT_S:" in problems
    assert "JUDGEFLOW_HOME:" in problems
    assert "JUDGEFLOW_NO_SUCH_THING, which is not a field" in problems


@pytest.mark.parametrize(
    "cell, value, ok",
    [
        ("unset (the embedded database)", None, True),
        ("`8`", None, False),
        ("`60`", 60.0, True),
        ("`20000`", 20_000, True),
        ("`20,000`", 20_000, True),
        ("`0.05`", 0.05, True),
        ("`0.5`", 0.05, False),
        ("`true`", True, True),
        ("`false`", True, False),
        ("`.judgeflow`", Path(".judgeflow"), True),
        ("`24h`", "24h", True),
        ("unset", "24h", False),
        ("`s3cr3t`", SecretStr("s3cr3t"), True),
        ("`app,model`", ["app", "model"], True),
    ],
)
def test_default_cells_are_read_as_written(cell, value, ok):
    assert default_matches(cell, value) is ok


# --- README commands ---------------------------------------------------------------


def shell_commands(text: str) -> list[list[str]]:
    """Every command line in the shell code blocks and the inline `judgeflow ...` /
    `./scripts/...` spans of the prose, as token lists starting at the program (leading
    VAR=value assignments dropped); indented '[--opt ...]' lines continue the line above."""
    lines: list[str] = []
    for lang, block in code_blocks(text):
        if lang not in SHELL_LANGS:
            continue
        for line in block:
            stripped = line.strip()
            if lines and (lines[-1].endswith("\\") or (line[:1].isspace() and stripped[:1] in "[-")):
                lines[-1] = lines[-1].rstrip("\\") + " " + stripped
            else:
                lines.append(stripped)
    for line in prose_lines(text):
        lines += [span for span in re.findall(r"`([^`]+)`", line)
                  if re.match(r"^(\.venv/bin/)?judgeflow [a-z]|^\./scripts/\w", span)]
    commands = []
    for line in lines:
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split()
        current: list[str] = []
        for token in tokens + ["&&"]:
            if token in ("&&", "||", ";", "|"):
                while current and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", current[0]):
                    current.pop(0)
                if current and (Path(current[0]).name == "judgeflow" or current[0].startswith("./scripts/")):
                    commands.append(current)
                current = []
            else:
                current.append(token)
    return commands


def judgeflow_command_problem(args: list[str]) -> str | None:
    """None if `judgeflow <args>` names an existing (sub)command whose options include
    every --option used and whose --help exits 0; else what is wrong."""
    import typer
    from typer.testing import CliRunner

    from judgeflow.cli import app

    command = typer.main.get_command(app)  # typer 0.29 vendors click: a group is told by .commands
    path: list[str] = []
    words = [word.strip("[]") for word in args]
    words = [word for word in words if word]
    rest = list(words)
    while rest and hasattr(command, "commands") and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])
        if sub is None:
            return f"`judgeflow {' '.join(path + [rest[0]])}`: no such command"
        path.append(rest.pop(0))
        command = sub
    known = {"--help"}
    for param in command.params:
        known.update(getattr(param, "opts", []))
        known.update(getattr(param, "secondary_opts", []))
    for word in rest:
        if word.startswith("-") and word != "-":
            option = word.split("=", 1)[0]
            if option not in known:
                return f"`judgeflow {' '.join(path)}` has no option {option}"
    result = CliRunner().invoke(app, [*path, "--help"])
    if result.exit_code != 0:
        return f"`judgeflow {' '.join(path)} --help` exited {result.exit_code}: {result.output[-500:]}"
    return None


def script_problem(args: list[str]) -> str | None:
    """None if ./scripts/<name> exists, is executable, parses, and the command it hands
    its arguments to (its `exec` line) answers --help with every --option used.

    The script itself is not run: each one first runs ./scripts/setup with its own
    extras (bench: the bench extra), which would re-install .venv in the middle of
    the suite."""
    script = ROOT / args[0]
    if not script.is_file():
        return f"{args[0]}: no such script"
    if not script.stat().st_mode & 0o111:
        return f"{args[0]}: not executable"
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    if syntax.returncode != 0:
        return f"{args[0]}: bash -n: {syntax.stderr.strip()}"
    source = script.read_text()
    help_text = wrapped_help(script)
    if help_text.startswith("!"):
        return f"{args[0]}: {help_text[1:]}"
    for word in (word.strip("[]") for word in args[1:]):
        option = word.split("=", 1)[0]
        if option.startswith("--") and option != "--help" and option not in source and option not in help_text:
            return f"{args[0]} has no option {option}"
    return None


@functools.lru_cache(maxsize=None)
def wrapped_help(script: Path) -> str:
    """The --help output of the command a script hands its arguments to; '!<why>' if
    that fails; '' when the script wraps no command."""
    execs = re.findall(r"^\s*exec\s+(.+)$", script.read_text(), flags=re.M)
    help_text = ""
    if execs:
        wrapped = [token for token in shlex.split(execs[-1], comments=True) if "$" not in token]
        if wrapped[0].startswith(".venv/bin/"):
            # the venv running this suite, wherever it lives
            wrapped[0] = str(Path(sys.executable).parent / Path(wrapped[0]).name)
        proc = subprocess.run(
            [*wrapped, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"},
        )
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr)[-500:]
            return f"!`{' '.join(wrapped)} --help` exited {proc.returncode}: {output}"
        help_text = proc.stdout + proc.stderr
    return help_text


def readme_command_problems(text: str) -> tuple[list[str], int]:
    commands = shell_commands(text)
    problems, scripts_checked = [], set()
    for command in commands:
        if Path(command[0]).name == "judgeflow":
            problem = judgeflow_command_problem(command[1:])
        else:
            key = " ".join(command)
            problem = script_problem(command) if key not in scripts_checked else None
            scripts_checked.add(key)
        if problem:
            problems.append(problem)
    return problems, len(commands)


def test_every_readme_command_exists():
    problems, checked = readme_command_problems(README.read_text())
    assert checked >= 3, f"only {checked} commands found in README.md: is the extraction broken?"
    assert not problems, "README.md shows commands that do not work:\n" + "\n".join(problems)


def test_every_command_in_the_docs_pages_exists():
    problems = []
    for page in sorted(DOCS.glob("*.md")):
        problems += [f"{page.name}: {problem}" for problem in readme_command_problems(page.read_text())[0]]
    assert not problems, "docs/ shows commands that do not work:\n" + "\n".join(problems)


def test_the_command_check_fails_on_a_command_that_does_not_exist():
    text = (
        "```bash\n"
        "judgeflow status --json           # exists\n"
        "judgeflow db upgrad               # typo\n"
        "JUDGEFLOW_X=1 .venv/bin/judgeflow score --batch-size 50 --no-such-flag\n"
        "judgeflow score [--limit N]\n"
        "                [--bogus 3]\n"
        "```\n"
        "Run `judgeflow frobnicate` or `./scripts/nope`.\n"
    )
    problems, checked = readme_command_problems(text)
    assert checked == 6
    assert problems == [
        "`judgeflow db upgrad`: no such command",
        "`judgeflow score` has no option --no-such-flag",
        "`judgeflow score` has no option --bogus",
        "`judgeflow frobnicate`: no such command",
        "./scripts/nope: no such script",
    ]


# --- README shape ------------------------------------------------------------------


def test_readme_starts_with_the_two_commands_and_stays_short():
    text = README.read_text()
    first_block = code_blocks(text)[0][1]
    assert [line.split()[0] for line in first_block[:2]] == ["./scripts/demo", "./scripts/test"]
    lines = len(text.splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): details belong in a docs/ page"
    )


# --- links -------------------------------------------------------------------------


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def link_problems(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for line in prose_lines(path.read_text()):
        line = re.sub(r"`[^`]*`", "", line)  # links are not read inside code spans
        for match in LINK.finditer(line):
            target = match.group(1) or match.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}: link {target!r}"
            if not resolved.exists():
                problems.append(f"{where}: {file_part} does not exist")
            elif root not in resolved.parents and resolved != root:
                problems.append(f"{where}: points outside the repository")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(f"{where}: no heading #{anchor} in {resolved.relative_to(root)}")
    return problems


def test_relative_links_resolve():
    problems = [problem for path in markdown_files() for problem in link_problems(path)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_check_fails_on_a_broken_link(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "settings.md").write_text("# Settings\n\n## Judge\n")
    (tmp_path / "outside.md").write_text("# Outside\n")
    page = docs / "probe.md"
    page.write_text(
        "# Probe\n\n## A `code` heading: here\n\n## A `code` heading: here\n\n"
        "[ok](settings.md) [ok](#a-code-heading-here-1) [ok](settings.md#judge) [web](https://example.com)\n"
        "[gone](nope.md) [bad anchor](settings.md#no-such-heading) [bad local](#nowhere)\n"
        "`[not a link](missing.md)`\n"
        "```\n[in a code block](missing.md)\n```\n"
    )
    problems = link_problems(page, root=docs)
    assert [problem.split(": ", 2)[1] for problem in problems] == [
        "link 'nope.md'", "link 'settings.md#no-such-heading'", "link '#nowhere'",
    ]
    (docs / "up.md").write_text("[up](../outside.md)\n")
    assert link_problems(docs / "up.md", root=docs) == ["up.md: link '../outside.md': points outside the repository"]


def test_every_docs_page_the_cli_points_to_exists():
    """CLI error lines end with '(see docs/<page>.md)', and messages and help name pages (and a heading,
    `docs/<page>.md#<heading>`): each such page must exist, with the heading named, in the source of every
    package folder (judgeflow/, metrics/, tasks/, flows/)."""
    named = set()
    for folder in ("judgeflow", "metrics", "tasks", "flows"):
        for source in (ROOT / folder).rglob("*.py"):
            named.update(re.findall(r"\b(docs/[\w.-]+\.md)(?:#([\w-]+))?", source.read_text()))
    assert len({page for page, _ in named}) >= 6
    missing = sorted(f"{page}#{heading}" if heading else page for page, heading in named
                     if not (ROOT / page).is_file() or (heading and heading not in anchors(ROOT / page)))
    assert not missing, f"the CLI points to docs pages (or headings) that do not exist: {missing}"


def test_every_docs_page_is_linked_from_the_readme():
    text = README.read_text()
    unlinked = [page.name for page in sorted(DOCS.glob("*.md")) if f"docs/{page.name}" not in text]
    assert not unlinked, f"docs pages the README does not link to: {unlinked}"


def _run_path_files(text: str) -> list[str]:
    """The files and folders named (in backticks) by DEVELOPING.md's "How a run executes"."""
    section = text.split("## How a run executes", 1)[1].split("\n## ", 1)[0]
    return sorted({name for name in re.findall(r"`([\w./-]+)`", section) if "/" in name})


def test_every_file_of_how_a_run_executes_exists():
    named = _run_path_files((DOCS / "DEVELOPING.md").read_text())
    assert len(named) >= 20 and "judgeflow/cli/scoring.py" in named
    assert [name for name in named if not (ROOT / name).exists()] == []
    # what the check reads: a file named there that is not in the repository is reported
    named = _run_path_files("## How a run executes\n1. `judgeflow/cli/nowhere.py` and `flows/scoring.py`\n")
    assert [name for name in named if not (ROOT / name).exists()] == ["judgeflow/cli/nowhere.py"]
