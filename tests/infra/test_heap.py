"""The garbage collector is tuned in one place (judgeflow/infra/heap.py) and
settled at the sites its module doc names, nowhere else."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from judgeflow.infra.heap import YOUNG_THRESHOLD

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("judgeflow", "tasks", "flows", "metrics")
# the one site of each kind of process (the module doc of judgeflow/infra/heap.py says why there)
SETTLED_IN = [
    ("judgeflow/cli/app.py", "main"),  # the command's process, at its entry
    ("judgeflow/cli/runs.py", "run_flow"),  # the same process when it runs a flow, once the flow is imported
    ("judgeflow/judge/pool/fork_server.py", "<module>"),  # the fork server's preload
    ("judgeflow/judge/pool/worker.py", "_start_calls"),  # a judge worker, once its judge is warm
]


def _calls(tree: ast.AST):
    """(enclosing function or '<module>', call node) for every call in ``tree``."""
    def walk(node, where):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call):
                yield where, child
            yield from walk(child, inner)
    yield from walk(tree, "<module>")


def _name(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f"{f.value.id}.{f.attr}"
    return f.id if isinstance(f, ast.Name) else ""


def test_the_heap_is_settled_at_one_site_per_kind_of_process_and_tuned_nowhere_else():
    sites, tuning = [], []
    for root in PRODUCT:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for where, call in _calls(ast.parse(path.read_text())):
                name = _name(call)
                if name.endswith("settle_heap"):
                    sites.append((rel, where))
                if name.startswith("gc.") and name != "gc.collect" and rel != "judgeflow/infra/heap.py":
                    tuning.append(f"{rel}: {name}")
    assert sorted(sites) == sorted(SETTLED_IN)
    assert not tuning


def test_a_settled_process_is_frozen_collects_young_objects_less_often_and_freezes_again_at_exit():
    program = (
        "import atexit, gc\n"
        # registered first, so it runs last: after the heap's exit handler
        "atexit.register(lambda: print('at exit', gc.get_freeze_count(), flush=True))\n"
        "from judgeflow.infra.heap import settle_heap\n"
        "before = gc.get_freeze_count()\n"
        "settle_heap()\n"
        "settle_heap()\n"  # twice, as a command's process that runs a flow does
        "print('settled', before, gc.get_freeze_count(), gc.get_threshold()[0], flush=True)\n"
        "left = [[] for _ in range(5000)]\n"  # garbage the run leaves: frozen at exit
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                         timeout=60).stdout.split("\n")
    _, before, settled, young = out[0].split()
    at_exit = out[1].split()[-1]
    assert out[1].startswith("at exit ")
    assert int(before) == 0 and int(settled) > 0
    assert int(young) == YOUNG_THRESHOLD
    assert int(at_exit) - int(settled) >= 4900  # the 5,000 lists left, give or take what exit freed
