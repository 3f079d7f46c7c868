"""A night scored through the provider's batch API (judgeflow/judge/batches.py):
real PostgreSQL, the real Prefect engine and API, litellm over real HTTP to the
test judge server's Files and Batches endpoints (tests/support/batch_api.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from judgeflow.flows.scoring import score_new_traces
from tests.support.traces import insert_traces, results, scripted_trace


@pytest.fixture
def batch_env(judgeflow_env, monkeypatch):
    for key, value in {"JUDGEFLOW_JUDGE_BATCH_POLL_S": "0.2", "JUDGEFLOW_JUDGE_BATCH_POLL_MAX_S": "1",
                       "JUDGEFLOW_JUDGE_BATCH_SETTLE_S": "0.3"}.items():
        monkeypatch.setenv(key, value)
    return judgeflow_env


@pytest.fixture
def run(prefect_server, batch_env):
    def _run(**params):
        params.setdefault("evaluate_alerts", False)
        return score_new_traces(**params)

    return _run


def batches_on_record(db) -> list[dict]:
    with db.connect() as conn:
        return [dict(r) for r in conn.execute(text(
            "SELECT b.batch_id, b.round, b.status, b.lines, b.completed_lines, b.failed_lines, "
            "       array_agg(DISTINCT l.step ORDER BY l.step) AS steps "
            "FROM judgeflow.judge_batches b JOIN judgeflow.judge_batch_lines l USING (batch_id) "
            "GROUP BY b.batch_id ORDER BY b.round, b.batch_id")).mappings()]


def test_a_night_through_batches_has_the_scores_of_the_same_night_online(run, db, judge_server, monkeypatch):
    judge_server.prices_per_mtok = (2.0, 8.0)  # the server bills batch lines at half of these
    monkeypatch.setenv("JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK", "2")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK", "8")
    rows, expected = zip(*(scripted_trace(i) for i in range(40)))
    insert_traces(db, rows)

    summary = run(batch=True)

    stored = results(db)
    assert summary.scored == 80 and summary.failed == 0
    for row, want in zip(rows, expected):
        for metric in ("toxicity", "hallucination"):
            got = stored[(row["id"], metric)]
            assert got["status"] == "scored", got["error"]
            assert got["score"] == pytest.approx(want[metric]), (row["id"], metric)
    api = judge_server.batch_api.stats()
    # opinions and hallucination in the first round, verdicts, then reasons: three rounds, each one batch
    on_record = batches_on_record(db)
    assert [b["round"] for b in on_record] == [1, 2, 3], on_record
    assert on_record[0]["steps"] == ["hallucination", "toxicity.opinions"]
    assert on_record[1]["steps"] == ["toxicity.verdicts"] and on_record[2]["steps"] == ["toxicity.reason"]
    assert all(b["status"] == "completed" for b in on_record)
    # the calls the same night makes online: 80 first steps, verdicts for the 30 toxicity pairs with
    # opinions, a reason for the 20 with a toxic one
    assert [b["lines"] for b in on_record] == [80, 30, 20]
    assert api["batches_created"] == 3 and sorted(api["lines_received"].values()) == [20, 30, 80]
    # nothing went online: every request the judge answered was a batch line
    assert len(judge_server.requests) == 130
    # the spend is what the provider billed, at the batch rate
    assert judge_server.billed_batch_usd == pytest.approx(judge_server.billed_usd) and judge_server.billed_usd > 0
    assert summary.judge_calls == 130
    assert summary.cost_usd == pytest.approx(judge_server.billed_batch_usd, rel=1e-3)
    assert sum(r["cost_usd"] for r in stored.values()) == pytest.approx(judge_server.billed_batch_usd, rel=1e-3)
