"""Shadow scoring of a session metric through the real flow (PostgreSQL, Prefect, litellm over HTTP to
the judge server): a sampled session's conversation is rebuilt from the source as session judging reads
it and judged by the candidate; a session that grew since its score is not sampled."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from tests.support.session_rows import CONVERSATION, seeded_shadow_sessions, serve_session_metric


@pytest.fixture
def session_metric(prefect_server, judgeflow_env, monkeypatch, tmp_path):
    monkeypatch.setenv("PREFECT_API_URL", prefect_server)
    yield from serve_session_metric(monkeypatch, tmp_path)


# ~20 s (a shadow-score flow run on this busy 2-core VM): the sample it judges is tests/tasks/test_shadow_sessions.py's
# (default suite)
@pytest.mark.slow
def test_a_session_metric_is_shadow_scored_over_its_rebuilt_conversation(session_metric, db, judge_server):
    from judgeflow.flows.shadow import shadow_score

    _, start, sid = seeded_shadow_sessions(db)
    before = judge_server.calls("GEvalScore")

    report = shadow_score(since=start - timedelta(hours=1), metrics=["resolved"])

    assert judge_server.calls("GEvalScore") - before == 1  # "grown" is left out
    sent = [r.data["conversation"] for r in judge_server.requests if r.step == "GEvalScore"][-1]
    assert sent == CONVERSATION
    with db.connect() as conn:
        rows = conn.execute(sa.text("SELECT trace_id, status, score, passed, current_score, current_passed "
                                    "FROM judgeflow.shadow_results")).mappings().all()
    assert [dict(r) for r in rows] == [{"trace_id": sid, "status": "scored", "score": 0.8, "passed": True,
                                        "current_score": 0.3, "current_passed": False}]
    assert [(m.metric, m.sampled, m.compared) for m in report.metrics] == [("resolved", 1, 1)]
