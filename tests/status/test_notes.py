"""`judgeflow status`'s lines besides its table (judgeflow/status/notes.py): the account limit as Prefect holds it."""

from __future__ import annotations

from judgeflow.status.notes import _account_lines


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
