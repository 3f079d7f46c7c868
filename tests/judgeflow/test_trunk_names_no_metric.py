"""The trunk serves whatever is registered (judgeflow/metrics/registry.py):
outside the metrics' own folders, the offline judge (which answers their
steps), the demo data and the migrations' history, no module names a metric."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRUNK = ("judgeflow", "tasks", "flows")
# the metrics' own code, and what is about particular metrics by nature
EXEMPT = ("judgeflow/judge/offline/", "judgeflow/demo/", "judgeflow/db/migrations/versions/")
# prose that uses the words, not the metrics: path -> how many lines
PROSE = {
    "judgeflow/errors.py": 1,  # what JudgeAbstained means ("no context to check a hallucination against")
    "judgeflow/sources/chat.py": 1,  # what a chat preset does with tool messages
    "judgeflow/calibration/labelled.py": 1,  # the labelled set's format, by example
    "judgeflow/judge/base.py": 1,  # what a request's step looks like, by example
}
NAMES = re.compile(r"toxic|hallucinat", re.IGNORECASE)


def test_no_trunk_module_names_a_metric():
    found: dict[str, list[str]] = {}
    for top in TRUNK:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(EXEMPT):
                continue
            lines = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                     if NAMES.search(line)]
            if len(lines) > PROSE.get(rel, 0):
                found[rel] = lines
    assert not found, "the trunk names a metric; take it from the registry instead:\n" + "\n".join(
        f"{rel}:{line}" for rel, lines in found.items() for line in lines)


def test_the_trunk_is_where_the_test_looks():
    # the test above passes vacuously if the tree moved
    assert (ROOT / "judgeflow" / "config" / "settings.py").exists() and (ROOT / "tasks" / "scoring.py").exists()
