"""The shadow sample of a session metric (tasks/shadow.py select_shadow_sample): each sampled session
with its conversation read from the source; a session that grew since its score left out."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.session_rows import CONVERSATION, seeded_shadow_sessions, serve_session_metric


@pytest.fixture
def session_metric(judgeflow_env, monkeypatch, tmp_path):
    yield from serve_session_metric(monkeypatch, tmp_path)


def test_the_sample_of_a_session_metric_carries_the_conversation(session_metric, db):
    """No flow, no judge: the flow's run of it is tests/flows/test_shadow_sessions.py's (slow)."""
    from judgeflow.run.metric_door import entry_settings
    from judgeflow.tasks.shadow import select_shadow_sample

    _, start, sid = seeded_shadow_sessions(db)
    pairs = select_shadow_sample.fn(entry_settings(), ["resolved"], start - timedelta(hours=1), None, 10, "seed")
    assert [(p.work.trace_id, p.work.turns, p.work.context, p.current.score) for p in pairs] == [
        (sid, 3, CONVERSATION, 0.3)]
