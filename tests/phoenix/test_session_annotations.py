"""A session's result of a Phoenix source written back as a session annotation (POST
/v1/session_annotations, by its session.id), never as a span annotation, through the same outbox;
a session Phoenix does not hold is refused alone, the rest written."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import text

from judgeflow.db import migrate
from judgeflow.phoenix.outbox import sync_phoenix, unwritten_counts
from judgeflow.sources.session_id import session_result_id
from tests.support.phoenix_receiver import PhoenixReceiver

SOURCE = "phoenix:spans@results-db"
SPAN = "a1a1a1a1a1a1a1a1"
KNOWN, UNKNOWN = "chat 1, with commas", "chat-gone"
T0 = datetime(2026, 11, 28, tzinfo=timezone.utc)


def test_a_session_result_is_written_as_a_session_annotation_never_a_span_one(db):
    migrate.upgrade(db)
    sessions = {key: session_result_id(SOURCE, key) for key in (KNOWN, UNKNOWN)}
    with db.begin() as conn:
        for key, session_id in sessions.items():
            conn.execute(text(
                "INSERT INTO judgeflow.sessions (session_id, source, session_key, first_turn_at, last_turn_at, turns) "
                "VALUES (:s, :src, :k, :t, :t, 4)"), {"s": session_id, "src": SOURCE, "k": key, "t": T0})
        for trace_id, metric, passed in [(SPAN, "toxicity", True), (sessions[KNOWN], "toxicity_session", False),
                                         (sessions[UNKNOWN], "toxicity_session", True)]:
            conn.execute(text(
                "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, threshold, reason, "
                "details, source) VALUES (:t, :m, 'scored', :s, :p, 0, 'why', '{\"turns\": 4}', :src)"),
                {"t": trace_id, "m": metric, "s": 0.0 if passed else 0.25, "p": passed, "src": SOURCE})
    with PhoenixReceiver(spans={SPAN}, sessions={KNOWN}) as phoenix:
        sync = sync_phoenix(db, SOURCE, phoenix.url, None)
        paths = [path for method, path, _ in phoenix.requests if method == "POST"]
    assert (sync.written, sync.failed, sync.stop) == (2, 1, None)  # the unknown session alone, not a stop
    assert set(phoenix.annotations) == {(SPAN, "judgeflow.toxicity", "judgeflow")}  # no session as a span
    assert paths.count("/v1/span_annotations") == 1 and "/v1/session_annotations" in paths
    written = phoenix.session_annotations[(KNOWN, "judgeflow.toxicity_session", "judgeflow")]
    assert written["result"] == {"label": "fail", "score": 0.25, "explanation": "why"}
    assert written["metadata"]["turns"] == 4 and written["annotator_kind"] == "LLM"
    with db.connect() as conn:
        error = conn.execute(text("SELECT write_back_error FROM judgeflow.eval_results WHERE trace_id = :t"),
                             {"t": sessions[UNKNOWN]}).scalar_one()
        assert error == f"Phoenix no longer holds session {UNKNOWN} (HTTP 404)"
        assert unwritten_counts(conn, SOURCE)["unwritten"] == 1
