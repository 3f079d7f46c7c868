"""The package's public surface and its import-time promises."""

from __future__ import annotations

import subprocess
import sys

from judgeflow.metrics import HallucinationMetric, MetricResult, ToxicityMetric, registered
from judgeflow.metrics.builtin import BUILTINS


def test_the_registry_serves_the_built_ins_by_their_stored_names_in_order() -> None:
    specs = registered()
    assert list(specs) == ["toxicity", "hallucination"]
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
