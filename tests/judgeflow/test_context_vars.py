"""Run state travels as arguments: at most two context variables in the product, each with a comment
above it saying why it is one (judgeflow/run/entry.py: what an entry point hands a flow it does not
call with arguments; judgeflow/judge/wire_slots.py: the attempt litellm gives no way to pass down)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "judgeflow", ROOT / "metrics", ROOT / "tasks", ROOT / "flows"]
MAX_CONTEXT_VARS = 2


def _context_vars() -> list[tuple[str, int, list[str]]]:
    """(file, line number, the lines above it) of every ContextVar made in the product."""
    found = []
    for folder in PRODUCT:
        for path in sorted(folder.rglob("*.py")):
            lines = path.read_text().splitlines()
            for number, line in enumerate(lines, 1):
                if re.search(r"\bContextVar\(", line):
                    found.append((str(path.relative_to(ROOT)), number, lines[:number - 1]))
    return found


def test_at_most_two_context_variables_each_after_a_comment_saying_why():
    found = _context_vars()
    assert 1 <= len(found) <= MAX_CONTEXT_VARS, [(f, n) for f, n, _ in found]
    for path, number, above in found:
        comment = []
        for line in reversed(above):
            if not line.strip().startswith("#"):
                break
            comment.append(line)
        assert len(comment) >= 2, f"{path}:{number}: a ContextVar without a comment above it saying why"
    assert {path for path, _, _ in found} == {"judgeflow/run/entry.py", "judgeflow/judge/wire_slots.py"}
