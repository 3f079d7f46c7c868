"""`judgeflow status`'s lines besides its table (judgeflow/status/notes.py) say what the database holds, and
guess no cause: the account limit as Prefect holds it, and the Phoenix write-back's counts as
judgeflow/phoenix/outbox.py's `unwritten_counts` gives them (tests/phoenix/test_outbox.py makes them over
real PostgreSQL)."""

from __future__ import annotations

from judgeflow.status.notes import _account_lines, status_notes


def _report(**write_back) -> dict:
    counts = {"on": True, "unwritten": 0, "gone": 0, "waiting": 0, "last_error": None, "oldest_scored_at": None}
    return {"source": "phoenix:spans", "source_notes": [], "skipped_by_preset": {},
            "phoenix_write_back": {**counts, **write_back}}


def test_spans_phoenix_no_longer_holds_are_counted_apart_and_not_offered_to_sync():
    lines = status_notes(_report(gone=2))
    assert lines[1:] == [
        "Phoenix write-back on: 0 scored result(s) not yet written to Phoenix",
        "Phoenix write-back: 2 scored result(s) not written for good: Phoenix no longer holds their span "
        "(`judgeflow phoenix sync --repair` tries them once more)"]
    waiting = status_notes(_report(unwritten=3, waiting=1, last_error="Phoenix at http://px:6006 did not answer"))
    assert waiting[1:] == [
        "Phoenix write-back on: 3 scored result(s) not yet written to Phoenix (1 waiting for their next try); "
        "`judgeflow phoenix sync` writes them now",
        "Phoenix write-back's last error: Phoenix at http://px:6006 did not answer"]


def test_results_of_a_metric_no_setting_serves_name_no_variable_the_user_never_set():
    report = {"source": "table:public.llm_traces@results-db", "source_notes": [], "skipped_by_preset": {},
              "no_longer_scored": {"helpfulness": 24}}
    [line] = [line for line in status_notes(report) if line.startswith("helpfulness")]
    assert line == ("helpfulness: not scored now (no built-in, plugin or metrics file of these settings serves it); "
                    "its 24 stored result(s) are kept")
    assert "JUDGEFLOW_METRICS_FILE" not in line


def test_the_account_limit_shows_its_name_limit_decay_and_active_slots():
    created = {"name": "judgeflow-judge-rpm", "per_minute": 600, "slots_per_item": 100, "steady_per_minute": 571.0,
               "created": True, "limit": 1000, "slot_decay_per_second": 951.61, "active_slots": 350, "active": True}
    missing = {"name": "judgeflow-judge-tpm", "per_minute": 90_000, "slots_per_item": 1, "steady_per_minute": 85_645.2,
               "created": False}
    rpm, tpm = _account_lines([created, missing])
    assert rpm.startswith("account limit judgeflow-judge-rpm: 600 requests/min")
    assert "limit 1,000 slots" in rpm and "decay 951.61 slots/s" in rpm and "active 350 slots" in rpm
    assert "100 slots a request" in rpm and "INACTIVE" not in rpm
    assert tpm == ("account limit judgeflow-judge-tpm: 90,000 tokens/min: not created yet in Prefect "
                   "(the first run creates it)")
    assert "INACTIVE: not enforced" in _account_lines([{**created, "active": False}])[0]
    assert _account_lines([]) == []
    named = _account_lines([{**created, "name": "judgeflow-judge-rpm-team-a",
                             "account": "JUDGEFLOW_JUDGE_ACCOUNT=team-a"}])[0]
    assert named.startswith("account limit judgeflow-judge-rpm-team-a (the account: JUDGEFLOW_JUDGE_ACCOUNT=team-a):")
