"""What the judgeflow command sets in its environment before litellm or Prefect
is imported anywhere: their configuration is read at import."""

from __future__ import annotations

import os

ENVIRONMENT_DEFAULTS = {
    # no network at import, no analytics, and judgeflow's own log lines shown in the Prefect UI
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "judgeflow",
    # judgeflow's log lines outside a flow run (alerts check, status) are not run logs
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
}


def apply_environment_defaults() -> None:
    """Each default, unless the environment already sets that variable."""
    for name, value in ENVIRONMENT_DEFAULTS.items():
        os.environ.setdefault(name, value)
