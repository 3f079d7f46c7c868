"""`--metric`, the same option on every command that judges: its help, and its
values read once (repeatable or comma-separated, each named once, each registered)."""

from __future__ import annotations

from typing import Optional

import typer

METRIC_HELP = "a registered metric, repeatable (default: every one; `judgeflow metrics` lists them)"


def metric_option(help_text: str = METRIC_HELP) -> Optional[list[str]]:
    return typer.Option(None, "--metric", metavar="NAME", help=help_text)


def chosen_metrics(values: list[str] | None) -> list[str] | None:
    """The metrics ``--metric`` named, in order, each once; None when it was not given
    (every registered metric). An unknown name is one error naming the registered ones."""
    if not values:
        return None
    from judgeflow.metrics.registry import check_names

    return check_names(list(dict.fromkeys(m.strip() for v in values for m in v.split(",") if m.strip())))
