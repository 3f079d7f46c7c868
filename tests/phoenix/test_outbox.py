"""The Phoenix write-back's outbox (judgeflow/phoenix/outbox.py) over real PostgreSQL and a
real HTTP server speaking Phoenix's REST shape (tests/support/phoenix_receiver.py): results
scored before the write-back was on are written later, failures are retried with backoff,
a refused key stops at once with one note, a re-score is written again."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import text

from judgeflow.db import migrate
from judgeflow.phoenix.annotations import check_access
from judgeflow.phoenix.outbox import GIVE_UP_AFTER, stale_unwritten_counts, sync_phoenix, unwritten_counts
from tests.support.phoenix import free_port
from tests.support.phoenix_receiver import PhoenixReceiver

SOURCE = "phoenix:spans@results-db"
SPANS = ["a1a1a1a1a1a1a1a1", "b2b2b2b2b2b2b2b2", "c3c3c3c3c3c3c3c3"]


@pytest.fixture
def results(db):
    """Three scored toxicity results of a Phoenix source, one preset skip, and a
    scored result of another source, none written to Phoenix."""
    migrate.upgrade(db)
    rows = [(span, "toxicity", "scored", 0.9 if i == 0 else 0.0, i != 0, SOURCE) for i, span in enumerate(SPANS)]
    rows += [("d4d4d4d4d4d4d4d4", "toxicity", "skipped", None, None, SOURCE),
             ("row-7", "toxicity", "scored", 0.0, True, "table:llm_traces@results-db")]
    with db.begin() as conn:
        for trace_id, metric, status, score, passed, source in rows:
            conn.execute(text(
                "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, threshold, reason, "
                "judge_model, metric_version, flow_run_id, source) VALUES "
                "(:t, :m, :st, :s, :p, 0.5, 'why', 'judge', '3', 'run-1', :src)"),
                {"t": trace_id, "m": metric, "st": status, "s": score, "p": passed, "src": source})
    return db


def _counts(conn) -> dict:
    counts = unwritten_counts(conn, SOURCE)
    return {k: counts[k] for k in ("unwritten", "gone", "waiting", "last_error")}


def _errors(engine) -> list[str | None]:
    """The write-back error of each scored result of the Phoenix source."""
    with engine.connect() as conn:
        return list(conn.execute(text(
            "SELECT write_back_error FROM judgeflow.eval_results WHERE source = :s AND status = 'scored' "
            "ORDER BY trace_id"), {"s": SOURCE}).scalars())


def _state(engine, trace_id):
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT written_back_at, write_back_error, write_back_tries, write_back_next_at > now() AS waiting "
            "FROM judgeflow.eval_results WHERE trace_id = :t"), {"t": trace_id}).mappings().one()


def test_results_scored_before_the_write_back_are_written_once_and_a_rescore_again(results):
    with results.connect() as conn:
        assert _counts(conn) == {"unwritten": 3, "gone": 0, "waiting": 0, "last_error": None}
    with PhoenixReceiver() as phoenix:
        first = sync_phoenix(results, SOURCE, phoenix.url, None)
        again = sync_phoenix(results, SOURCE, phoenix.url, None)
        assert (first.written, first.failed, first.left) == (3, 0, 0)
        assert (again.written, len(phoenix.posts())) == (0, 1)  # nothing left: no second POST
        assert sorted(span for span, _, _ in phoenix.annotations) == SPANS  # not the skip, not the other source
        toxic = phoenix.annotations[(SPANS[0], "judgeflow.toxicity", "judgeflow")]
        assert toxic["result"] == {"label": "fail", "score": 0.9, "explanation": "why"}
        with results.begin() as conn:  # a re-score stores a new score later
            conn.execute(text("UPDATE judgeflow.eval_results SET score = 0.1, passed = true, "
                              "scored_at = now() + interval '1 second' WHERE trace_id = :t"), {"t": SPANS[0]})
        rescored = sync_phoenix(results, SOURCE, phoenix.url, None)
        assert rescored.written == 1
        assert phoenix.annotations[(SPANS[0], "judgeflow.toxicity", "judgeflow")]["result"]["label"] == "pass"
    assert _state(results, SPANS[0])["written_back_at"] is not None


def test_a_phoenix_that_is_down_is_retried_with_backoff_and_caught_up_when_it_is_back(results):
    port = free_port()  # nothing listens there yet
    url = f"http://127.0.0.1:{port}"
    down = sync_phoenix(results, SOURCE, url, None)
    assert (down.written, down.failed, down.left) == (0, 0, 3)
    assert "did not answer" in down.note and "ConnectError" in down.note and "phoenix sync" in down.note
    # a stop: the batch in flight counts no try, as the rest does not; the stop is every result's last error
    for span in SPANS:
        state = _state(results, span)
        assert state["write_back_tries"] == 0 and not state["waiting"]
        assert "ConnectError" in state["write_back_error"]
    with PhoenixReceiver(port=port) as phoenix:
        caught_up = sync_phoenix(results, SOURCE, url, None)  # the next run: all due, all written
        assert (caught_up.written, caught_up.left, phoenix.posts()) == (3, 0, [200])
    state = _state(results, SPANS[1])
    assert state["written_back_at"] is not None and state["write_back_error"] is None


def test_phoenix_going_down_with_the_batch_in_flight_counts_no_try(results):
    """Phoenix takes the request and goes down before it answers (the connection dropped mid-request):
    a stop, as docs/tables.md says; the batch in flight counts no try, as none of the rest does."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    taken = []

    def take_and_drop():
        conn, _ = listener.accept()
        taken.append(conn.recv(65536))  # the request arrived ...
        conn.close()  # ... and Phoenix is gone before it answers

    server = threading.Thread(target=take_and_drop, daemon=True)
    server.start()
    try:
        dropped = sync_phoenix(results, SOURCE, f"http://127.0.0.1:{listener.getsockname()[1]}", None)
    finally:
        server.join(timeout=10)
        listener.close()
    assert taken and taken[0].startswith(b"POST /v1/span_annotations")  # the batch was in flight
    assert dropped.stop and "did not answer" in dropped.note and (dropped.written, dropped.failed) == (0, 0)
    for span in SPANS:
        state = _state(results, span)
        assert state["write_back_tries"] == 0 and not state["waiting"], (span, state)


def test_a_due_retry_is_made_by_the_next_run(results):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    assert sync_phoenix(results, SOURCE, url, None, backoff_s=0).stop  # Phoenix down: a stop, all still due
    with PhoenixReceiver(port=port):
        assert sync_phoenix(results, SOURCE, url, None).written == 3


def test_a_refused_key_stops_at_once_with_one_note_and_leaves_the_results_due(results):
    with PhoenixReceiver(api_key="right-key") as phoenix:
        refused = sync_phoenix(results, SOURCE, phoenix.url, "wrong-key")
        assert refused.auth_refused and phoenix.posts() == [401]  # one request, then stop
        assert (refused.written, refused.failed, refused.left) == (0, 0, 3)
        assert "refused the API key (HTTP 401)" in refused.note and "JUDGEFLOW_PHOENIX_API_KEY" in refused.note
        assert _state(results, SPANS[0])["write_back_tries"] == 0  # not counted against the results
        # ... but every waiting result carries it: status and show say why they wait
        assert _errors(results) == [refused.stop] * 3 and phoenix.url in refused.stop
        with results.connect() as conn:
            assert _counts(conn)["last_error"] == refused.stop
        assert sync_phoenix(results, SOURCE, phoenix.url, "right-key").written == 3
    assert _errors(results) == [None] * 3


def test_a_span_phoenix_no_longer_holds_fails_alone_and_is_final_after_its_tries(results):
    gone = f"Phoenix no longer holds span {SPANS[0]} (HTTP 404)"
    with PhoenixReceiver(spans=set(SPANS[1:])) as phoenix:
        first = sync_phoenix(results, SOURCE, phoenix.url, None, backoff_s=0)
        assert (first.written, first.failed) == (2, 1) and SPANS[0] in first.errors[0]
        # Phoenix names the span it does not hold: the batch is posted again without it, not one by one
        assert phoenix.posts() == [404, 200]
        assert first.errors == [gone]
        for _ in range(GIVE_UP_AFTER - 1):
            last = sync_phoenix(results, SOURCE, phoenix.url, None, backoff_s=0)
        assert (last.gone, last.left, last.left_gone) == (1, 0, 1)
        assert "1 score(s) not written for good: Phoenix no longer holds their span" in last.note
        assert "wait unwritten" not in last.note
        with results.connect() as conn:  # final: counted apart, not unwritten, not an error of the outbox
            assert _counts(conn) == {"unwritten": 0, "gone": 1, "waiting": 0, "last_error": None}
            assert stale_unwritten_counts(conn, SOURCE, stale_before=datetime.now(timezone.utc)) == (0, 0)
        assert _state(results, SPANS[0])["write_back_error"] == gone
        posts = len(phoenix.posts())
        synced = sync_phoenix(results, SOURCE, phoenix.url, None, everything=True)  # `phoenix sync`
        assert (synced.failed, synced.left, len(phoenix.posts())) == (0, 0, posts)  # not tried again
        phoenix.spans = None  # Phoenix has the span after all: a repair writes it
        assert sync_phoenix(results, SOURCE, phoenix.url, None, repair=True).written == 3
        with results.connect() as conn:
            assert _counts(conn)["gone"] == 0


def test_a_repair_rewrites_annotations_phoenix_lost(results):
    with PhoenixReceiver() as phoenix:
        assert sync_phoenix(results, SOURCE, phoenix.url, None).written == 3
        lost = (SPANS[1], "judgeflow.toxicity", "judgeflow")
        del phoenix.annotations[lost]  # a user deleted it in Phoenix
        assert sync_phoenix(results, SOURCE, phoenix.url, None, everything=True).written == 0  # outbox empty
        repaired = sync_phoenix(results, SOURCE, phoenix.url, None, repair=True)
        assert (repaired.written, repaired.left) == (3, 0)  # not the skip, not the other source
        assert phoenix.annotations[lost]["result"] == {"label": "pass", "score": 0.0, "explanation": "why"}
        assert sorted(span for span, _, _ in phoenix.annotations) == SPANS
        # a written span that Phoenix deleted since: back in the outbox, its tries counting
        phoenix.spans = set(SPANS[1:])
        again = sync_phoenix(results, SOURCE, phoenix.url, None, repair=True, backoff_s=0)
        assert (again.written, again.failed, again.left) == (2, 1, 1)
        state = _state(results, SPANS[0])
        assert state["written_back_at"] is None and state["write_back_tries"] == 1


def test_db_checks_access_names_what_is_wrong():
    with PhoenixReceiver(api_key="right-key") as phoenix:
        assert check_access(phoenix.url, "right-key")[0] == "ok"
        level, message = check_access(phoenix.url, "wrong-key")
        assert level == "MISSING" and "JUDGEFLOW_PHOENIX_API_KEY was refused (HTTP 401)" in message
        level, message = check_access(phoenix.url, None)
        assert level == "MISSING" and "Phoenix wants an API key" in message
        level, message = check_access(phoenix.url + "/not-phoenix", "right-key")
        assert level == "MISSING" and "with a web page, not the API's JSON" in message
        assert "not-phoenix" not in message and "JUDGEFLOW_PHOENIX_URL has a path" in message
    level, message = check_access(f"http://127.0.0.1:{free_port()}", None)
    assert level == "MISSING" and "does not answer" in message


def test_db_check_checks_the_write_back_only_when_it_is_on():
    from judgeflow.status.check import CheckReport, _check_write_back
    from judgeflow.config.settings import Settings

    with PhoenixReceiver(api_key="right-key") as phoenix:
        on = Settings(_env_file=None, source="phoenix", phoenix_write_back=True, phoenix_url=phoenix.url,
                      phoenix_api_key="wrong-key")
        report = CheckReport()
        _check_write_back(report, on)
        assert not report.ok and "JUDGEFLOW_PHOENIX_API_KEY was refused" in report.lines()[0]
        off = CheckReport()
        _check_write_back(off, on.model_copy(update={"phoenix_write_back": False}))
        assert off.ok and off.findings == [] and len(phoenix.requests) == 1


def test_db_check_proves_the_write_back_can_write():
    """Phoenix answers any GET with its web page and 200: only JSON from its API, the key
    accepted, and the annotations endpoint taking a POST pass."""
    with PhoenixReceiver(api_key="right-key", read_only_key="viewer-key") as phoenix:
        level, message = check_access(phoenix.url, "right-key")
        assert level == "ok" and "takes annotations (the API key accepted for writing)" in message
        assert [(m, p) for m, p, _ in phoenix.requests] == [("GET", "/v1/projects"), ("POST", "/v1/span_annotations")]
        assert phoenix.annotations == {}  # the probe writes no annotation
        # what Phoenix's own banner calls its REST API: every read answers HTML, with any key
        for key in ("right-key", "wrong-key"):
            level, message = check_access(phoenix.url + "/v1", key)
            assert level == "MISSING" and "with a web page, not the API's JSON" in message, message
        level, message = check_access(phoenix.url, "viewer-key")
        assert level == "MISSING" and "JUDGEFLOW_PHOENIX_API_KEY was refused for writing annotations (HTTP 403)" in message
    with PhoenixReceiver(status=503) as phoenix:
        level, message = check_access(phoenix.url, None)
        assert level == "MISSING" and "answered HTTP 503" in message


@pytest.mark.parametrize("refusal", [405, 404])
def test_a_url_that_is_not_phoenixs_api_stops_at_once_and_gives_nothing_up(results, refusal):
    """A wrong prefix: Phoenix answers a POST there 405 (another server 404) for the whole
    request. One request, one note naming scheme, host and port only, no try counted, so
    no result is ever given up for it; the error stays on the results until a write works."""
    with PhoenixReceiver(wrong_post_status=refusal) as phoenix:
        wrong = phoenix.url + "/v1/secret-path-token?key=query-token"
        for _ in range(GIVE_UP_AFTER + 2):
            stopped = sync_phoenix(results, SOURCE, wrong, None, backoff_s=0)
            assert stopped.request_refused and (stopped.written, stopped.failed, stopped.left) == (0, 0, 3)
        assert phoenix.posts() == [refusal] * (GIVE_UP_AFTER + 2)  # one request per pass
        assert f"Phoenix at {phoenix.url} refused the annotation request itself (HTTP {refusal})" in stopped.note
        assert "3 score(s) wait unwritten" in stopped.note and "given up" not in stopped.note
        for told in (stopped.note, *_errors(results)):
            assert "secret-path-token" not in told and "query-token" not in told and "/v1/" not in told
        with results.connect() as conn:
            assert _counts(conn) == {"unwritten": 3, "gone": 0, "waiting": 0, "last_error": stopped.stop}
        assert _state(results, SPANS[0])["write_back_tries"] == 0
        assert sync_phoenix(results, SOURCE, phoenix.url, None).written == 3
