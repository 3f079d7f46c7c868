"""Regression alerts per segment through the real scoring flow: real PostgreSQL,
real Prefect, the local judge server, a real webhook receiver.

Three apps, each with a week of traces:

- ``a`` rises from 0/70 to 6/30 (p ~ 5e-4): one alert, for app=a only;
- ``b`` rises from 0/70 to 4/10, more than the minimum increase but on fewer
  than JUDGEFLOW_ALERT_MIN_SAMPLES (20) results: none;
- ``c`` improves from 28/70 to 3/30: none.

Overall (13/70 against 28/210, p ~ 0.19) does not fire either. A second run
sends nothing; 100 more clean traces of app a bring it back to its baseline
(6/130, p ~ 0.07 > the resolve level 0.05) and the alert resolves, once.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction
from math import comb

import pytest
import sqlalchemy as sa

from judgeflow.flows.scoring import score_new_traces
from tests.support.traces import insert_traces
from tests.support.webhook_receiver import WebhookReceiver

TOXIC = "You are hopeless [toxic]."
CLEAN = "Happy to help with that."


def exact_p_greater(x: int, n: int, y: int, m: int) -> float:
    """The hypergeometric upper tail by exact enumeration (independent of judgeflow.alerts.stats)."""
    total, bad = n + m, x + y
    tail = sum(comb(bad, k) * comb(total - bad, n - k) for k in range(x, min(n, bad) + 1))
    return float(Fraction(tail, comb(total, n)))


def _traces(app: str, *, baseline: tuple[int, int], window: tuple[int, int], start: int = 0) -> list[dict]:
    """``baseline`` = (toxic, total) spread over 1.5 to 7.5 days ago; ``window`` in the last 20 hours."""
    now = datetime.now(timezone.utc)
    rows = []
    for period, (toxic, total) in (("base", baseline), ("win", window)):
        for i in range(total):
            if period == "base":
                created = now - timedelta(days=1.5) - timedelta(days=6) * (i / max(1, total - 1))
            else:
                created = now - timedelta(hours=1) - timedelta(hours=19) * (i / max(1, total - 1))
            rows.append({
                "id": f"{app}-{period}-{start + i:04d}",
                "created_at": created,
                "output": TOXIC if i < toxic else CLEAN,
                "metadata": {"app": app, "model": "m1"},
            })
    return rows


@pytest.fixture
def regression_env(judgeflow_env, monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "20")
    monkeypatch.setenv("JUDGEFLOW_ALERT_WINDOW", "24h")
    monkeypatch.setenv("JUDGEFLOW_TOXICITY_RATE_MAX", "1.0")  # the maximum rule never fires here
    monkeypatch.setenv("JUDGEFLOW_TOXICITY_REGRESSION_MIN_INCREASE", "0.02")
    monkeypatch.setenv("JUDGEFLOW_ALERT_PREFECT_EVENTS", "false")
    return judgeflow_env


def _score():
    state = score_new_traces(metrics=["toxicity"], batch_size=100, return_state=True)
    assert state.is_completed()
    return state.result()


def test_one_segment_regresses_one_alert_then_it_resolves_once(prefect_server, regression_env, db, monkeypatch):
    insert_traces(db, _traces("a", baseline=(0, 70), window=(6, 30)))
    insert_traces(db, _traces("b", baseline=(0, 70), window=(4, 10)))
    insert_traces(db, _traces("c", baseline=(28, 70), window=(3, 30)))
    with WebhookReceiver() as hook:
        monkeypatch.setenv("JUDGEFLOW_ALERT_WEBHOOK_URL", hook.url)
        summary = _score()
        assert summary.scored == 280

        # the segment values were copied into judgeflow's table when scored
        with db.connect() as conn:
            segments = dict(conn.execute(sa.text(
                "SELECT segment->>'app', count(*) FROM judgeflow.eval_results GROUP BY 1"
            )).all())
        assert segments == {"a": 100, "b": 80, "c": 100}

        [fired] = [r.json() for r in hook.requests]
        assert (fired["rule"], fired["notification"], fired["segment"]) == ("toxicity_regression", "fired", {"app": "a"})
        assert (fired["violations"], fired["sample_size"]) == (6, 30)
        assert (fired["baseline_violations"], fired["baseline_sample_size"]) == (0, 70)
        assert fired["rate"] == 0.2 and fired["baseline_rate"] == 0.0 and fired["min_increase"] == 0.02
        assert fired["p_value"] == pytest.approx(exact_p_greater(6, 30, 0, 70), rel=1e-9)
        assert fired["p_value"] < 0.01
        worst = fired["worst_traces"]
        assert len(worst) == 5 and all(w["trace_id"].startswith("a-win-") for w in worst)

        with db.connect() as conn:
            rows = {
                r.segment_key: r for r in conn.execute(sa.text(
                    "SELECT * FROM judgeflow.alerts WHERE rule = 'toxicity_regression'"
                ))
            }
        assert set(rows) == {"", "app=a", "app=b", "app=c"}
        assert rows["app=a"].state == "firing"
        assert (rows["app=b"].state, rows["app=b"].last_outcome, rows["app=b"].sample_size) == ("ok", "not_enough_data", 10)
        assert (rows["app=c"].state, rows["app=c"].last_outcome) == ("ok", "ok")
        assert rows["app=c"].value < rows["app=c"].baseline_value  # improved
        overall = rows[""]
        assert (overall.state, overall.violations, overall.sample_size) == ("ok", 13, 70)
        assert overall.p_value == pytest.approx(exact_p_greater(13, 70, 28, 210), rel=1e-9)
        assert rows["app=b"].p_value == pytest.approx(exact_p_greater(4, 10, 0, 70), rel=1e-9)

        _score()  # nothing new: still firing, nothing sent
        assert len(hook.requests) == 1

        # logged over the last 20 hours, after the first run's watermark: read within the look-back
        monkeypatch.setenv("JUDGEFLOW_SOURCE_LOOKBACK", "24h")
        insert_traces(db, _traces("a", baseline=(0, 0), window=(0, 100), start=1000))
        _score()
        _score()  # and nothing more after that
        payloads = [r.json() for r in hook.requests]
    assert [(p["notification"], p["segment"]) for p in payloads] == [("fired", {"app": "a"}), ("resolved", {"app": "a"})]
    resolved = payloads[1]
    assert (resolved["violations"], resolved["sample_size"]) == (6, 130)
    assert resolved["p_value"] == pytest.approx(exact_p_greater(6, 130, 0, 70), rel=1e-9)
    with db.connect() as conn:
        kinds = conn.execute(sa.text(
            "SELECT segment_key, kind FROM judgeflow.alert_events ORDER BY id"
        )).all()
    assert [tuple(k) for k in kinds] == [("app=a", "fired"), ("app=a", "resolved")]
