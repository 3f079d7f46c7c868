"""judgeflow's modules, read with ``ast``: no import cycles (imports inside
functions counted), and nothing of Prefect's or litellm's patched."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# where each import name's files live (setup.py's package_dir)
ROOTS = {"judgeflow": REPO / "judgeflow", "judgeflow.metrics": REPO / "metrics",
         "judgeflow.tasks": REPO / "tasks", "judgeflow.flows": REPO / "flows"}
PATCHED_PACKAGES = ("prefect", "litellm")
# The only assignments allowed, each to a setting litellm documents as its configuration (set on the
# module, as its docs and dspy/OpenHands do; no environment variable controls it), with the one value
# allowed: suppress_debug_info stops the banner litellm print()s on every failed call and on an
# unknown provider (judgeflow/judge/litellm_judge.py). Anything else assigned to Prefect or litellm,
# or this setting given another value, is still a patch.
DOCUMENTED_SETTINGS = {"litellm.suppress_debug_info": True}


def judgeflow_modules() -> dict[str, Path]:
    """Every judgeflow module by its import name."""
    modules = {}
    for root_name, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            if ".venv" in path.parts or "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([root_name, *parts])
            if root_name == "judgeflow" and parts and parts[0] in ("metrics", "tasks", "flows"):
                continue  # not where those packages live
            modules[name] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_time_nodes(tree: ast.AST):
    """Every node that can run: all of them but the bodies of ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imported_names(name: str, path: Path) -> set[str]:
    """The absolute names a module imports anywhere (functions included), as
    written: ``from a import b`` gives ``a.b`` and ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in _run_time_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = judgeflow_modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in imported_names(name, path):
            # the module itself, or for `from package import attribute` the package
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                targets.add(imported)  # a module's own packages are already being imported
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_module_reader_sees_function_level_imports_and_finds_a_cycle():
    graph = import_graph()
    assert "judgeflow.judge.litellm_judge" in graph["judgeflow.judge.pool.worker"]  # imported inside serve()
    assert "judgeflow.run.metric_door" in graph["judgeflow.cli.command"]  # imported inside a function
    assert "judgeflow.config.settings" not in graph["judgeflow.judge.factory"]  # under TYPE_CHECKING only
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_judgeflow_has_no_import_cycles_counting_imports_inside_functions():
    found = cycles(import_graph())
    assert not found, "import cycles among judgeflow's modules:\n" + "\n".join(" <-> ".join(c) for c in found)


def _patch_targets(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every assignment to an attribute of a name bound to a
    Prefect or litellm module or object, and every setattr/delattr on one."""
    bound: set[str] = set()  # local names of prefect/litellm modules and what was imported from them
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PATCHED_PACKAGES:
                    bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] in PATCHED_PACKAGES:
            bound.update(alias.asname or alias.name for alias in node.names)

    def root(expr: ast.expr) -> str | None:
        while isinstance(expr, (ast.Attribute, ast.Subscript)):
            expr = expr.value
        return expr.id if isinstance(expr, ast.Name) else None

    plain_modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names if alias.asname is None and alias.name in PATCHED_PACKAGES}

    def documented_setting(node: ast.AST) -> bool:
        """``litellm.<setting> = <its allowed value>``, on the module imported under its own name."""
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            return False
        target, value = node.targets[0], node.value
        return (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                and target.value.id in plain_modules and ast.unparse(target) in DOCUMENTED_SETTINGS
                and isinstance(value, ast.Constant)
                and value.value is DOCUMENTED_SETTINGS[ast.unparse(target)])

    found = []
    for node in ast.walk(tree):
        if documented_setting(node):
            continue
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for sub in ast.walk(target):  # tuples unpacked into several targets included
                if isinstance(sub, ast.Attribute) and root(sub) in bound:
                    found.append((node.lineno, ast.unparse(sub)))
                    break
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("setattr", "delattr") and node.args and root(node.args[0]) in bound:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_patch_finder_finds_assignments_and_setattr():
    code = ("import litellm\nfrom prefect import flow_engine as fe\nimport prefect.logging.configuration\n"
            "litellm.drop_params = True\nfe._send_heartbeats = None\n"
            "prefect.logging.configuration.load_logging_config = None\nsetattr(litellm, 'x', 1)\n"
            "import os\nos.environ['A'] = '1'\n")
    assert [line for line, _ in _patch_targets(ast.parse(code))] == [4, 5, 6, 7]


def test_the_patch_finder_allows_only_the_named_settings_with_their_value():
    code = ("import litellm\nimport litellm as ll\nfrom litellm import utils\n"
            "litellm.suppress_debug_info = True\n"  # the one documented setting allowed
            "litellm.suppress_debug_info = False\n"  # another value
            "ll.suppress_debug_info = True\n"  # through an alias
            "utils.suppress_debug_info = True\n"  # on another module of litellm's
            "litellm.set_verbose = True\n"  # a documented setting not in the list
            "litellm.suppress_debug_info = x = True\n"  # chained: x is not litellm's, but not one plain setting
            "setattr(litellm, 'suppress_debug_info', True)\n"
            "litellm.suppress_debug_info += True\n")
    assert sorted(line for line, _ in _patch_targets(ast.parse(code))) == [5, 6, 7, 8, 9, 10, 11]
    assert DOCUMENTED_SETTINGS == {"litellm.suppress_debug_info": True}


def test_litellm_adapter_sets_the_documented_setting():
    adapter = REPO / "judgeflow" / "judge" / "litellm_judge.py"
    assert "litellm.suppress_debug_info = True" in [line.strip() for line in adapter.read_text().splitlines()]
    assert _patch_targets(ast.parse(adapter.read_text())) == []


def test_no_judgeflow_module_assigns_to_prefect_or_litellm():
    found = [f"{path.relative_to(REPO)}:{line}: {what}"
             for path in judgeflow_modules().values() for line, what in _patch_targets(ast.parse(path.read_text()))]
    assert not found, "judgeflow changes Prefect or litellm:\n" + "\n".join(found)


# The modules that import litellm: the adapter, and its batch calls, which reuse the adapter's request,
# reply and error paths but are a surface of their own (files, batches, their prices) a run uses apart.
LITELLM_IMPORTERS = {"judgeflow.judge.litellm_judge", "judgeflow.judge.litellm_batches"}


def test_only_the_adapter_modules_import_litellm():
    importers = {name for name, path in judgeflow_modules().items()
                 if any(n == "litellm" or n.startswith("litellm.") for n in imported_names(name, path))}
    assert importers == LITELLM_IMPORTERS
