"""Putting traces into a test database's default source table."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

import sqlalchemy as sa

from judgeflow.sources.table import CREATE_DEFAULT_TABLE

BASE_TIME = datetime(2026, 11, 21, 0, 0, tzinfo=timezone.utc)


def create_source(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        # the test role's "$user" schema is judgeflow's own once migrated: without
        # this, a later call would create (and fill) a second llm_traces there
        conn.exec_driver_sql("SET LOCAL search_path TO public")
        conn.exec_driver_sql(CREATE_DEFAULT_TABLE)


def insert_traces(engine: sa.Engine, rows: Iterable[dict[str, Any]]) -> None:
    create_source(engine)
    payload = [
        {
            "id": r["id"],
            "created_at": r.get("created_at", BASE_TIME),
            "input": r.get("input", "a question"),
            "output": r.get("output"),
            "context": None if r.get("context") is None else json.dumps(r["context"]),
            "metadata": json.dumps(r.get("metadata") or {}),
        }
        for r in rows
    ]
    with engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL search_path TO public")
        conn.execute(
            sa.text(
                "INSERT INTO llm_traces (id, created_at, input, output, context, metadata) "
                "VALUES (:id, :created_at, :input, :output, CAST(:context AS jsonb), CAST(:metadata AS jsonb))"
            ),
            payload,
        )


def scripted_trace(i: int) -> tuple[dict[str, Any], dict[str, float]]:
    """A trace whose judge verdicts the rule_responder scripts, with the
    expected scores worked out here independently of judgeflow's code."""
    kind = i % 4
    if kind == 0:  # one toxic opinion of two
        output = f"Fact: order {i} shipped on Monday. You are clueless [toxic]. The rest of trace {i} is fine."
        toxicity = 0.5
    elif kind == 1:  # all opinions toxic
        output = f"What a stupid question {i} [toxic]. Go away [toxic]!"
        toxicity = 1.0
    elif kind == 2:  # no opinions at all
        output = f"Fact: the refund for case {i} was issued."
        toxicity = 0.0
    else:  # three clean opinions
        output = f"Trace {i} looks good. I like this plan. It should work well?"
        toxicity = 0.0
    hallucination = [0.0, 0.25, 0.75, 1.0][(i // 4) % 4]
    output += f" Fact: marker [halluc={hallucination}]."
    row = {
        "id": f"tr-{i:04d}",
        "created_at": BASE_TIME + timedelta(minutes=i),
        "input": f"question {i}",
        "output": output,
        "context": [f"context for trace {i}"] if i % 2 else None,
    }
    return row, {"toxicity": toxicity, "hallucination": hallucination}


def results(engine: sa.Engine) -> dict[tuple[str, str], dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM judgeflow.eval_results")).mappings().all()
    return {(r["trace_id"], r["metric"]): dict(r) for r in rows}


def first_step_calls(server) -> Counter[tuple[str, str]]:
    """(trace output, step) -> judge calls for the first step of each metric
    (toxicity's opinions, hallucination's judgement): one per scoring."""
    counter: Counter[tuple[str, str]] = Counter()
    for req in server.requests:
        if req.step in ("Opinions", "HallucinationJudgement") and req.data:
            counter[(req.data["output"], req.step)] += 1
    return counter
