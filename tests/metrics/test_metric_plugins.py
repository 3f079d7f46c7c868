"""Code metrics come in through the same door as the built-ins: a
distribution's entry point in the group ``judgeflow.metrics``. A tiny
distribution on the path of a fresh process (its entry points are read once
per process) is served, listed as a plugin, and its name is taken."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.builtins import BUILT_IN

PLUGIN = '''
from judgeflow.metrics.geval.metric import GEvalDefinition, geval_spec

SPEC = geval_spec(GEvalDefinition(name="politeness", criteria="The reply is polite.", inputs=("output",),
                                  evaluation_steps=("Read the reply.", "Decide whether it is polite.")))
'''


def _distribution(root: Path) -> None:
    (root / "judgeflow_test_plugin").mkdir()
    (root / "judgeflow_test_plugin" / "__init__.py").write_text(PLUGIN)
    info = root / "judgeflow_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: judgeflow-test-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[judgeflow.metrics]\npoliteness = judgeflow_test_plugin:SPEC\n")


def _judgeflow(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGEFLOW_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "judgeflow", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_plugin_metric_is_served_through_the_entry_point_group_beside_the_built_ins(tmp_path):
    _distribution(tmp_path)
    (tmp_path / "clash.toml").write_text('[metrics.politeness]\ncriteria = "x"\n')
    listed = _judgeflow(tmp_path, "metrics", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["metrics"]}
    assert [(name, row["origin"]) for name, row in rows.items()] == [
        *((name, "built-in") for name in BUILT_IN), ("politeness", "plugin")]
    assert rows["politeness"]["inputs"] == ["output"] and rows["politeness"]["version"].startswith("politeness/1+")
    clash = _judgeflow(tmp_path, "metrics", "--check", "clash.toml")
    assert clash.returncode == 2
    (line,) = clash.stderr.strip().splitlines()
    assert "clash.toml: metric politeness: clashes with a built-in or plugin metric" in line
