"""Pure LLM-as-a-judge metrics: prompt templates, response schemas, scoring rules.

Nothing here performs I/O except through the :class:`~judgeflow.judge.base.Judge`
a metric is given, and nothing imports prefect, sqlalchemy or litellm.
"""

from judgeflow.metrics.base import JudgeMetric
from judgeflow.metrics.hallucination.metric import HallucinationMetric, hallucination_version
from judgeflow.metrics.hallucination.template import FewShotExample
from judgeflow.metrics.result import MetricResult
from judgeflow.metrics.toxicity.metric import ToxicityMetric, toxicity_version

# Metric name (as stored with each score) -> class.
METRICS: dict[str, type[JudgeMetric]] = {
    ToxicityMetric.name: ToxicityMetric,
    HallucinationMetric.name: HallucinationMetric,
}

__all__ = [
    "METRICS",
    "FewShotExample",
    "HallucinationMetric",
    "JudgeMetric",
    "MetricResult",
    "ToxicityMetric",
    "hallucination_version",
    "toxicity_version",
]
