"""Pure LLM-as-a-judge metrics: prompt templates, response schemas, scoring rules.

Nothing here performs I/O except through the :class:`~judgeflow.judge.base.Judge`
a metric is given, and nothing imports prefect, sqlalchemy or litellm. Which
metrics the trunk serves is :mod:`judgeflow.metrics.registry`.
"""

from judgeflow.metrics.base import JudgeMetric
from judgeflow.metrics.hallucination.metric import HallucinationMetric, hallucination_version
from judgeflow.metrics.hallucination.template import FewShotExample
from judgeflow.metrics.registry import CostEstimate, MetricSettings, MetricSpec, register, registered
from judgeflow.metrics.result import MetricResult
from judgeflow.metrics.toxicity.metric import ToxicityMetric, toxicity_version

__all__ = [
    "CostEstimate",
    "FewShotExample",
    "HallucinationMetric",
    "JudgeMetric",
    "MetricResult",
    "MetricSettings",
    "MetricSpec",
    "ToxicityMetric",
    "hallucination_version",
    "register",
    "registered",
    "toxicity_version",
]
