"""judgeflow/cli/errors.py: an error line names the docs page that explains its kind; a metrics file's
problems, wherever they are found (reading the file, a settings check of its segment keys), are metrics.md's."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from judgeflow.cli import app

BAD_FILES = {
    "no_output": '[metrics.helpful]\ncriteria = "x"\ninputs = ["input"]\n',
    "clash": '[metrics.toxicity]\ncriteria = "x"\n',
    "not_toml": "nonsense",
    "threshold": '[metrics.h]\ncriteria = "x"\nthreshold = 2\n',
    # found by the settings, not the file's reader: the Phoenix source's traces have no such key
    "segment_key": '[metrics.h]\ncriteria = "x"\nsegment_by = ["nope"]\n',
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_metrics_file_problem_points_to_the_metrics_page(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no stray .env
    path = tmp_path / "metrics.toml"
    path.write_text(BAD_FILES[case])
    env = {"JUDGEFLOW_METRICS_FILE": str(path), "JUDGEFLOW_HOME": str(tmp_path / "home"),
           "JUDGEFLOW_SOURCE": "phoenix" if case == "segment_key" else "table"}
    result = CliRunner().invoke(app, ["metrics"], env=env)
    assert result.exit_code == 2, result.output
    [line] = result.output.splitlines()
    assert line.startswith(f"judgeflow: {path}") and line.endswith("(see docs/metrics.md)"), line


def test_an_unreadable_metrics_file_points_to_the_metrics_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["metrics"], env={"JUDGEFLOW_METRICS_FILE": str(tmp_path / "none.toml"),
                                                       "JUDGEFLOW_HOME": str(tmp_path / "home")})
    assert result.exit_code == 2 and result.output.rstrip().endswith("(see docs/metrics.md)"), result.output
