"""No function in the product is longer than 60 lines: every function of
judgeflow/, tasks/, flows/ and metrics/, read with ``ast``, counted from its
``def`` line to the last line of its body (decorators not counted)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("judgeflow", "tasks", "flows", "metrics")
MAX_LINES = 60

# Functions in files other helpers of issue 45 are rewriting (tasks/scoring.py,
# run/, judge/ but offline/overlap.py, db/leases.py, metrics/, alerts/rules.py,
# sampling/, calibration/, db/epochs.py), as "path:qualified name". The lead
# empties this list once their branches are merged.
KNOWN_UNTIL_MERGED: frozenset[str] = frozenset()


def function_lengths(path: Path) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function in ``path``, nested ones included."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child.end_lineno - child.lineno + 1))
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(), str(path)), "")
    return found


def long_functions() -> dict[str, int]:
    out = {}
    for root in PRODUCT:
        for path in sorted((REPO / root).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            for name, lines in function_lengths(path):
                if lines > MAX_LINES:
                    out[f"{path.relative_to(REPO).as_posix()}:{name}"] = lines
    return out


def test_no_function_in_the_product_is_over_60_lines():
    too_long = {name: lines for name, lines in long_functions().items() if name not in KNOWN_UNTIL_MERGED}
    assert not too_long, "functions over 60 lines:\n" + "\n".join(
        f"  {name}: {lines} lines" for name, lines in sorted(too_long.items()))


def test_every_known_exception_is_still_long():
    # an entry whose function was shortened or removed goes from the list with it
    assert not KNOWN_UNTIL_MERGED - set(long_functions())


def test_the_count_runs_from_the_def_line_to_the_body_end_without_decorators(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "@decorator\n"
        "@another\n"
        "def f(\n"
        "    a,\n"
        "):\n"
        "    x = 1\n"
        "    return x\n"
        "\n"
        "class C:\n"
        "    async def g(self):\n"
        "        def inner():\n"
        "            pass\n"
        "        return inner\n"
    )
    assert function_lengths(source) == [("f", 5), ("C.g", 4), ("C.g.inner", 2)]
