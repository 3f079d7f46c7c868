"""judgeflow's folders are layers: each imports only folders below it.

Every import counts, those inside functions and under ``if TYPE_CHECKING:``
included: a hidden dependency is still a dependency. docs/DEVELOPING.md
("Layers") draws the same order and says what each layer owns.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.judgeflow.test_imports import judgeflow_modules

# From the bottom. "core" is judgeflow's loose modules (the domain types, the
# errors, text safe to print); the package `judgeflow.__main__` is the CLI's.
LAYERS = (
    "core",
    "config",
    "infra",
    "judge",
    "metrics",
    "sources",
    "db",
    "phoenix",
    "alerts",
    "sampling",
    "run",
    "calibration",
    "shadow",
    "status",
    "tasks",
    "flows",
    "demo",
    "cli",
)
RANK = {layer: rank for rank, layer in enumerate(LAYERS)}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if module == "judgeflow.__main__":
        return "cli"
    if len(parts) < 2 or parts[1] not in RANK:
        return "core"
    return parts[1]


def every_import(name: str, path: Path) -> set[str]:
    """The absolute judgeflow names a module imports anywhere, TYPE_CHECKING blocks included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                module = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {n for n in found if n == "judgeflow" or n.startswith("judgeflow.")}


def upward_imports(modules: dict[str, Path]) -> list[str]:
    """Each import of a module of a folder at or above the importer's own
    (another folder of the same rank counts: there is one at each rank)."""
    wrong = []
    for name, path in sorted(modules.items()):
        mine = layer_of(name)
        for target in sorted(every_import(name, path)):
            theirs = layer_of(target)
            if theirs != mine and RANK[theirs] > RANK[mine]:
                wrong.append(f"{name} ({mine}) imports {target} ({theirs})")
    return wrong


def test_every_folder_of_judgeflow_has_a_layer():
    folders = {p.name for p in (Path(__file__).resolve().parents[2] / "judgeflow").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert folders | {"metrics", "tasks", "flows"} == set(LAYERS) - {"core"}


def test_the_layer_reader_counts_function_and_type_checking_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from judgeflow.cli import app\n"
                      "def f():\n    import judgeflow.flows.scoring\n")
    assert upward_imports({"judgeflow.judge.m": module}) == [
        "judgeflow.judge.m (judge) imports judgeflow.cli (cli)",
        "judgeflow.judge.m (judge) imports judgeflow.cli.app (cli)",
        "judgeflow.judge.m (judge) imports judgeflow.flows.scoring (flows)",
    ]


def test_no_folder_imports_a_folder_above_it():
    wrong = upward_imports(judgeflow_modules())
    assert not wrong, f"{len(wrong)} imports go up the layers (docs/DEVELOPING.md, \"Layers\"):\n" + "\n".join(wrong)


def test_metrics_import_only_the_judge_interface_and_the_loose_modules():
    """A metric knows the judge by its interface alone (and the loop a judge is called on, for a metric's
    ``score()`` outside a run), and nothing of the settings or the run."""
    allowed = ("judgeflow.judge.base", "judgeflow.judge.judge_loop", "judgeflow.errors", "judgeflow.model")
    wrong = [f"{name} imports {target}" for name, path in sorted(judgeflow_modules().items())
             if layer_of(name) == "metrics"
             for target in sorted(every_import(name, path))
             if layer_of(target) != "metrics" and target != "judgeflow"
             and not any(target == ok or target.startswith(ok + ".") for ok in allowed)]
    assert not wrong, "\n".join(wrong)


def test_the_tests_mirror_the_source_tree():
    """Each folder of tests/ is a folder of the product (its tests), or names what it tests besides code."""
    repo = Path(__file__).resolve().parents[2]
    besides_code = {"judgeflow", "support", "bench", "deployments", "docker", "docs"}
    folders = {p.name for p in (repo / "tests").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders - besides_code <= set(LAYERS) - {"core"}, sorted(folders - besides_code - set(LAYERS))
    assert not [p for p in (repo / "tests").glob("*/*/test_*.py") if p.parts[-3] != "support"], \
        "tests one folder deeper than the source they test"
