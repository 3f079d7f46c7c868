"""The package's public surface and its import-time promises."""

from __future__ import annotations

import subprocess
import sys

from judgeflow.metrics import HallucinationMetric, MetricResult, ToxicityMetric, registered
from judgeflow.metrics.builtin import BUILTINS
from tests.support.builtins import BUILT_IN


def test_the_registry_serves_the_built_ins_by_their_stored_names_in_order() -> None:
    specs = registered()
    assert tuple(specs) == BUILT_IN and BUILT_IN  # the entry point's, first
    assert tuple(specs.values()) == BUILTINS
    assert isinstance(specs["toxicity"].build(None, specs["toxicity"].settings(), _options()), ToxicityMetric)
    assert isinstance(specs["hallucination"].build(None, specs["hallucination"].settings(), _options()),
                      HallucinationMetric)
    assert MetricResult.model_fields["metric_version"].is_required()


def _options():
    from judgeflow.metrics.registry import BuildOptions

    return BuildOptions()


def test_importing_metrics_pulls_in_no_io_libraries() -> None:
    code = (
        "import sys, judgeflow.metrics; "
        "print(sorted(m for m in ('prefect', 'sqlalchemy', 'litellm', 'psycopg') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_metric_folder_is_a_package_an_install_keeps() -> None:
    """setup.py installs the packages setuptools finds under metrics/: a folder of Python files without an
    ``__init__.py`` would work in the editable install and be missing from ``pip install .`` (the Docker image)."""
    from pathlib import Path

    from setuptools import find_packages

    root = Path(__file__).resolve().parents[2] / "metrics"
    installed = set(find_packages(root))
    folders = {path.parent.relative_to(root).as_posix().replace("/", ".") for path in root.rglob("*.py")
               if path.parent != root and "__pycache__" not in path.parts}
    assert folders <= installed, f"metric folders without __init__.py (pip install . drops them): {folders - installed}"
