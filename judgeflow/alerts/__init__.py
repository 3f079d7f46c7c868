"""Rolling-window alert rules over eval_results: evaluation, a per-rule state
machine kept in ``judgeflow.alerts``, and notifications (Prefect event,
signed webhook, Slack). See the README, "Alerts".

The names below are imported on first use (PEP 562): every ``judgeflow``
command imports :mod:`judgeflow.cli.alerts` to mount ``judgeflow alerts``,
and ``judgeflow score`` should not wait for the rules, the notifiers and
SQLAlchemy before it starts its judge workers."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "rule_specs": "judgeflow.alerts.rules", "Rule": "judgeflow.alerts.rules",
    "all_rules": "judgeflow.alerts.rules", "enabled_rules": "judgeflow.alerts.rules",
    "RuleEvaluation": "judgeflow.alerts.service", "evaluate_rules": "judgeflow.alerts.service",
    "render_markdown": "judgeflow.alerts.service",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
