"""Rolling-window alert rules over eval_results: evaluation, a per-rule state
machine kept in ``judgeflow.alerts``, and notifications (Prefect event,
signed webhook, Slack). See the README, "Alerts"."""

from judgeflow.alerts.rules import RULE_SPECS, Rule, all_rules, enabled_rules
from judgeflow.alerts.service import RuleEvaluation, evaluate_rules, render_markdown

__all__ = ["RULE_SPECS", "Rule", "RuleEvaluation", "all_rules", "enabled_rules", "evaluate_rules", "render_markdown"]
