"""What metrics needed from the judge once (``judgeflow.metric_steps``,
migration 17_metric_steps.py): read, and written by the first run that made it."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, text

from judgeflow.db.schema import SCHEMA


def stored(conn: Connection, wanted: dict[str, str]) -> dict[str, Any]:
    """``{metric: value}`` of the stored values of ``wanted`` (``{metric: key}``)."""
    if not wanted:
        return {}
    rows = conn.execute(
        text(f"SELECT metric, key, value FROM {SCHEMA}.metric_steps WHERE metric = ANY(CAST(:metrics AS text[]))"),
        {"metrics": list(wanted)},
    ).mappings()
    return {row["metric"]: row["value"] for row in rows if wanted.get(row["metric"]) == row["key"]}


def store(conn: Connection, metric: str, key: str, value: Any, judge_model: str) -> Any:
    """Keep ``value`` unless another run stored one first; the value kept (the first one)."""
    conn.execute(
        text(f"INSERT INTO {SCHEMA}.metric_steps (metric, key, value, judge_model) "
             "VALUES (:metric, :key, CAST(:value AS jsonb), :model) ON CONFLICT (metric, key) DO NOTHING"),
        {"metric": metric, "key": key, "value": json.dumps(value, ensure_ascii=False), "model": judge_model},
    )
    return stored(conn, {metric: key})[metric]


def accept_stored(conn: Connection, specs: dict[str, Any]) -> list[str]:
    """Hand each metric of ``specs`` (``{metric: spec with a preparation}``)
    its stored value; the metrics still without one."""
    found = stored(conn, {name: spec.prepare.key for name, spec in specs.items()})
    for name, value in found.items():
        specs[name].prepare.accept(value)
    return [name for name in specs if name not in found]
