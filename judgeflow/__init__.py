"""judgeflow: scheduled LLM-as-a-judge evaluation of production LLM traces."""

__version__ = "0.1.0"
