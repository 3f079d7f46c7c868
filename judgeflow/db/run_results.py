"""What given flow runs wrote to judgeflow's tables: their results by status,
judge calls and cost, and their late results recorded as superseded. A sharded
night's parent reads its children's figures here, so its summary says what the
database holds."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, text


_RESULTS = text(
    "SELECT flow_run_id, status, count(*), coalesce(sum(judge_calls), 0), coalesce(sum(cost_usd), 0), "
    "coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), coalesce(sum(cached_tokens), 0) "
    "FROM judgeflow.eval_results WHERE flow_run_id IN :ids GROUP BY 1, 2"
).bindparams(bindparam("ids", expanding=True))
_TRACES = text(
    "SELECT count(DISTINCT trace_id) FROM judgeflow.eval_results WHERE flow_run_id IN :ids"
).bindparams(bindparam("ids", expanding=True))
_SUPERSEDED = text(
    "SELECT flow_run_id, count(*), coalesce(sum(judge_calls), 0), coalesce(sum(cost_usd), 0) "
    "FROM judgeflow.superseded_results WHERE flow_run_id IN :ids GROUP BY 1"
).bindparams(bindparam("ids", expanding=True))


def results_of_runs(conn: Connection, flow_run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """flow run id -> {"statuses": {status: rows}, "judge_calls", "cost_usd", "tokens": [prompt, completion,
    cached], "superseded"}; every id
    is there, with zeros when it wrote nothing. A superseded result's calls and cost were spent too."""
    out: dict[str, dict[str, Any]] = {
        run_id: {"statuses": {}, "judge_calls": 0, "cost_usd": 0.0, "tokens": [0, 0, 0], "superseded": 0}
        for run_id in flow_run_ids
    }
    if not flow_run_ids:
        return out
    for run_id, status, rows, calls, cost, *tokens in conn.execute(_RESULTS, {"ids": flow_run_ids}).all():
        figures = out[run_id]
        figures["statuses"][status] = int(rows)
        figures["tokens"] = [have + int(more) for have, more in zip(figures["tokens"], tokens)]
        figures["judge_calls"] += int(calls)
        figures["cost_usd"] += float(cost)
    for run_id, rows, calls, cost in conn.execute(_SUPERSEDED, {"ids": flow_run_ids}).all():
        figures = out[run_id]
        figures["superseded"] = int(rows)
        figures["judge_calls"] += int(calls)
        figures["cost_usd"] += float(cost)
    return out


def traces_of_runs(conn: Connection, flow_run_ids: list[str]) -> int:
    """The distinct traces these flow runs stored results of (a trace's pairs may be in several)."""
    if not flow_run_ids:
        return 0
    return int(conn.execute(_TRACES, {"ids": flow_run_ids}).scalar_one())
