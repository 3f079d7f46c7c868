"""The package's public surface and its import-time promises."""

from __future__ import annotations

import subprocess
import sys

from judgeflow.metrics import METRICS, HallucinationMetric, MetricResult, ToxicityMetric


def test_registry_maps_stored_names_to_classes() -> None:
    assert METRICS == {"toxicity": ToxicityMetric, "hallucination": HallucinationMetric}
    assert MetricResult.model_fields["metric_version"].is_required()


def test_importing_metrics_pulls_in_no_io_libraries() -> None:
    code = (
        "import sys, judgeflow.metrics; "
        "print(sorted(m for m in ('prefect', 'sqlalchemy', 'litellm', 'psycopg') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
