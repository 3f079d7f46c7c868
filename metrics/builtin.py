"""judgeflow's own metrics, served through the same door as a plugin's: the
``judgeflow.metrics`` entry point ``builtin`` (pyproject.toml) names
:data:`BUILTINS`, which :mod:`judgeflow.metrics.registry` registers in this
order (the order of ``judgeflow status`` and reports)."""

from __future__ import annotations

from judgeflow.metrics.hallucination.metric import SPEC as HALLUCINATION
from judgeflow.metrics.toxicity.metric import SPEC as TOXICITY

BUILTINS = (TOXICITY, HALLUCINATION)
