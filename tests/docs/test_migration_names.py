"""Comments, docstrings and docs name a migration by its file
(``09_judge_epochs.py``), never by its alembic revision id alone: the ids are
not in the order of the files (09_judge_epochs.py holds the revision numbered
ten), so an id sends a reader to the wrong file.

Allowed: the ``Revision ID:`` line of a migration's own docstring, and an id
followed by its file in parentheses, as each ``Revises:`` line has it. Code
(the ids passed to ``command.downgrade``) is not prose and is not read."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VERSIONS = REPO / "judgeflow" / "db" / "migrations" / "versions"
PY_ROOTS = ("judgeflow", "tasks", "flows", "metrics", "tests", "bench", "deployments", "docker", "scripts")
FOUR_DIGITS = re.compile(r"(?<![\w.\-/\\])(\d{4})(?![\w])")


def revision_files() -> dict[str, str]:
    """Each migration's revision id -> its file name."""
    out = {}
    for path in sorted(VERSIONS.glob("[0-9]*.py")):
        found = re.search(r'^revision = "(\w+)"', path.read_text(), re.M)
        assert found, f"{path.name} has no revision"
        out[found.group(1)] = path.name
    return out


def prose_of_python(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring line of a module."""
    lines = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            lines.append((tok.start[0], tok.string))
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                first = body[0].lineno
                lines += [(first + i, text) for i, text in enumerate(body[0].value.value.splitlines())]
    return lines


def citations_by_id(text: str, revisions: dict[str, str], *, own: str | None = None) -> list[str]:
    """The revision ids ``text`` cites without their file (or with the wrong one)."""
    if own is not None and text.strip() == f"Revision ID: {own}":
        return []
    bad = []
    for match in FOUR_DIGITS.finditer(text):
        rev = match.group(1)
        if rev not in revisions:
            continue
        if not text[match.end():].startswith(f" ({revisions[rev]})"):
            bad.append(rev)
    return bad


def _prose_files():
    for root in PY_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            if "__pycache__" not in path.parts and ".venv" not in path.parts:
                yield path, "py"
    for path in [*sorted(REPO.glob("*.md")), *sorted((REPO / "docs").rglob("*.md"))]:
        yield path, "md"


def test_no_comment_docstring_or_doc_cites_a_migration_by_its_revision_id():
    revisions = revision_files()
    own_of = {name: rev for rev, name in revisions.items()}
    found = []
    for path, kind in _prose_files():
        source = path.read_text(encoding="utf-8")
        lines = prose_of_python(source) if kind == "py" else list(enumerate(source.splitlines(), 1))
        own = own_of.get(path.name) if path.parent == VERSIONS else None
        for number, text in lines:
            for rev in citations_by_id(text, revisions, own=own):
                found.append(f"{path.relative_to(REPO)}:{number}: {rev} is {revisions[rev]}: {text.strip()}")
    assert not found, "migrations cited by revision id; name the file instead:\n" + "\n".join(found)


def test_the_check_reads_comments_and_docstrings_but_not_code():
    revisions = {"0010": "09_judge_epochs.py", "0008": "10_watermarks.py"}
    source = (
        '"""Module doc (migration 0010)."""\n'
        'upgrade(db, "0008")  # the 0008 trigger\n'
        'def f():\n'
        '    """Since 09_judge_epochs.py; uid 10001; demo-0010."""\n'
    )
    cited = [rev for _, text in prose_of_python(source) for rev in citations_by_id(text, revisions)]
    assert sorted(cited) == ["0008", "0010"]
    assert citations_by_id("Revises: 0008 (10_watermarks.py)", revisions) == []
    assert citations_by_id("Revises: 0008 (09_judge_epochs.py)", revisions) == ["0008"]
    assert citations_by_id("Revision ID: 0010", revisions, own="0010") == []
    assert citations_by_id("Revision ID: 0010", revisions, own="0008") == ["0010"]


def test_every_migration_file_is_known_by_its_revision():
    revisions = revision_files()
    assert len(revisions) == len(list(VERSIONS.glob("[0-9]*.py")))
    assert revisions["0010"] == "09_judge_epochs.py"
