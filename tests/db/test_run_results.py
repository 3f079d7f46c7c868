"""judgeflow/db/run_results.py: what given flow runs stored, as a sharded night's parent reads it."""

from __future__ import annotations

import sqlalchemy as sa

from judgeflow.db.run_results import results_of_runs, traces_of_runs

RESULT = sa.text(
    "INSERT INTO judgeflow.eval_results (trace_id, metric, status, flow_run_id, judge_calls, cost_usd, "
    "prompt_tokens, completion_tokens, cached_tokens) VALUES (:t, :m, :s, :run, :calls, :cost, :p, :c, :k)"
)
SUPERSEDED = sa.text(
    "INSERT INTO judgeflow.superseded_results (trace_id, metric, status, flow_run_id, judge_calls, cost_usd, "
    "owner, why) VALUES (:t, :m, 'scored', :run, 2, 0.5, 'someone', 'taken over')"
)


def test_each_runs_results_superseded_ones_and_traces(db):
    rows = [
        ("t1", "toxicity", "scored", "child-1", 2, 0.25, 100, 10, 4),
        ("t1", "hallucination", "failed", "child-2", 1, None, 50, 0, 0),
        ("t2", "toxicity", "scored", "child-2", 3, 0.5, 70, 7, 0),
        ("t3", "toxicity", "skipped", "someone-else", 1, 1.0, 1, 1, 1),
    ]
    with db.begin() as conn:
        for t, m, s, run, calls, cost, p, c, k in rows:
            conn.execute(RESULT, dict(t=t, m=m, s=s, run=run, calls=calls, cost=cost, p=p, c=c, k=k))
        conn.execute(SUPERSEDED, dict(t="t2", m="hallucination", run="child-1"))
    with db.connect() as conn:
        figures = results_of_runs(conn, ["child-1", "child-2", "child-3"])
        traces = traces_of_runs(conn, ["child-1", "child-2"])
    assert figures["child-1"] == {"statuses": {"scored": 1}, "judge_calls": 4, "cost_usd": 0.75,
                                  "tokens": [100, 10, 4], "superseded": 1}
    assert figures["child-2"] == {"statuses": {"failed": 1, "scored": 1}, "judge_calls": 4, "cost_usd": 0.5,
                                  "tokens": [120, 7, 0], "superseded": 0}
    assert figures["child-3"] == {"statuses": {}, "judge_calls": 0, "cost_usd": 0.0, "tokens": [0, 0, 0],
                                  "superseded": 0}
    assert traces == 2


def test_no_runs_no_query(db):
    with db.connect() as conn:
        assert results_of_runs(conn, []) == {} and traces_of_runs(conn, []) == 0
