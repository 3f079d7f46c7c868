"""Judge epochs through the real scoring flow: real PostgreSQL, real Prefect, the
local judge server with two scripted judges that disagree on a known set of
traces (``judge-a`` flags 5% of opinions, ``judge-b`` 12%, the first's a
subset of the second's: tests/support/judge_server.py's fraction_responder).

Switching from the lenient to the strict judge must not page: the rules count
only the new judge's results and say "judge changed at ..." until they have
enough of them; a backfill with ``--rescore`` gives the new epoch a baseline at
once, after which a real rise within the new epoch still fires. A new metric
version starts an epoch like a new judge model.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from judgeflow.alerts.stats import fisher_greater
from judgeflow.db import migrate
from judgeflow.flows.backfill import backfill_traces
from judgeflow.flows.scoring import score_new_traces
from judgeflow.config.settings import load_settings
from tests.support.judge_server import JudgeServer, flagged, fraction_responder
from tests.support.traces import insert_traces

FRACTIONS = {"judge-a": 0.05, "judge-b": 0.12}
MIN_SAMPLES = 20
ALPHA = 0.01


def _rows(prefix: str, n: int, *, days_ago: tuple[float, float], app_of=lambda i: "ab"[i % 2], text=None) -> list[dict]:
    """``n`` one-opinion traces created evenly between ``days_ago`` (older, newer)."""
    now = datetime.now(timezone.utc)
    old, new = days_ago
    rows = []
    for i in range(n):
        created = now - timedelta(days=old) + timedelta(days=old - new) * (i / max(1, n - 1))
        rows.append({
            "id": f"{prefix}-{i:04d}",
            "created_at": created,
            # one sentence, no final stop: the whole output is the trace's one opinion
            "output": text(i) if text else f"Reply {prefix} {i} about order {i * 7}",
            "metadata": {"app": app_of(i)},
        })
    return rows


def _bad(rows: list[dict], judge: str) -> int:
    return sum(flagged(r["output"], FRACTIONS[judge]) or "[toxic]" in r["output"] for r in rows)


@pytest.fixture
def epochs_env(judgeflow_env, monkeypatch, db):
    # judgeflow's schema first: the test server's user is "judgeflow", so once the
    # schema exists an unqualified llm_traces created later would land in it
    migrate.upgrade(db)
    with JudgeServer(fraction_responder(FRACTIONS)) as server:
        monkeypatch.setenv("JUDGEFLOW_JUDGE_API_BASE", server.url)
        monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/judge-a")
        monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
        monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", str(MIN_SAMPLES))
        monkeypatch.setenv("JUDGEFLOW_ALERT_WINDOW", "24h")
        monkeypatch.setenv("JUDGEFLOW_REGRESSION_BASELINE", "7d")
        monkeypatch.setenv("JUDGEFLOW_REGRESSION_ALPHA", str(ALPHA))
        monkeypatch.setenv("JUDGEFLOW_TOXICITY_RATE_MAX", "0.5")  # the maximum rule: present, never breached here
        monkeypatch.setenv("JUDGEFLOW_TOXICITY_REGRESSION_MIN_INCREASE", "0.02")
        monkeypatch.setenv("JUDGEFLOW_ALERT_PREFECT_EVENTS", "false")
        # each step logs traces hours back, behind the last run's watermark: read them
        # within a day's look-back (the 1 h default leaves them to a backfill)
        monkeypatch.setenv("JUDGEFLOW_SOURCE_LOOKBACK", "24h")
        yield server


def _score():
    state = score_new_traces(metrics=["toxicity"], batch_size=200, return_state=True)
    assert state.is_completed()
    return state.result()


def _alerts(db) -> dict[tuple[str, str], sa.Row]:
    with db.connect() as conn:
        return {(r.rule, r.segment_key): r for r in conn.execute(sa.text("SELECT * FROM judgeflow.alerts"))}


def _events(db) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(
            "SELECT rule, segment_key, kind FROM judgeflow.alert_events ORDER BY id"))]


@pytest.mark.slow  # six scoring runs over ~600 traces: about a minute on a busy 2-core machine
def test_switching_to_a_stricter_judge_does_not_page_and_a_real_rise_still_fires(prefect_server, epochs_env, db,
                                                                                  monkeypatch):
    baseline = _rows("base", 300, days_ago=(7.0, 1.5))
    window_a = _rows("win-a", 10, days_ago=(0.9, 0.8))
    insert_traces(db, baseline + window_a)
    first = _score()
    assert first.scored == 310 and first.judge_epochs == []  # the first epoch is no change

    # judge-a's figures: a quiet week, and a window too small to judge (no judge change: plain not enough data)
    rows = _alerts(db)
    assert rows[("toxicity_regression", "")].last_outcome == "not_enough_data"
    assert rows[("toxicity_regression", "")].baseline_violations == _bad(baseline, "judge-a")

    # the switch: judge-b flags more of the same kind of traces
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/judge-b")
    few = _rows("win-b1", MIN_SAMPLES - 8, days_ago=(0.5, 0.45))
    insert_traces(db, few)
    switched = _score()
    assert len(switched.judge_epochs) == 1
    assert "judge model openai/judge-a -> openai/judge-b" in switched.judge_epochs[0]
    assert "Judge changed." in switched.markdown()
    with db.connect() as conn:
        epochs = conn.execute(sa.text(
            "SELECT metric, judge_model, started_at FROM judgeflow.judge_epochs ORDER BY id")).all()
    assert [(e.metric, e.judge_model) for e in epochs] == [("toxicity", "openai/judge-a"), ("toxicity", "openai/judge-b")]
    changed_at = epochs[1].started_at

    rows = _alerts(db)
    for key in [("toxicity_rate", ""), ("toxicity_regression", ""), ("toxicity_regression", "app=a"),
                ("toxicity_rate", "app=b")]:
        assert rows[key].last_outcome == "insufficient_data", key
        assert rows[key].epoch_started_at == changed_at
        assert rows[key].state == "ok"
    # only the new judge's results count: none of judge-a's 10 in the window
    assert rows[("toxicity_rate", "")].sample_size == len(few)
    assert rows[("toxicity_regression", "")].baseline_sample_size == 0

    # enough of the new judge's results in the window; still no baseline of its own
    more = _rows("win-b2", 180, days_ago=(0.4, 0.05))
    insert_traces(db, more)
    _score()
    window_b = few + more
    rows = _alerts(db)
    assert rows[("toxicity_rate", "")].last_outcome == "ok"  # the maximum rule needs no baseline
    assert rows[("toxicity_rate", "")].violations == _bad(window_b, "judge-b")
    regression = rows[("toxicity_regression", "")]
    assert (regression.last_outcome, regression.state, regression.sample_size) == (
        "insufficient_data", "ok", len(window_b))
    assert _events(db) == []
    # the same data, mixed as before epochs: judge-b's window against judge-a's
    # week is a "significant rise" that would have paged
    mixed_p = fisher_greater(_bad(window_b, "judge-b") + _bad(window_a, "judge-a"), len(window_b) + len(window_a),
                             _bad(baseline, "judge-a"), len(baseline))
    assert _bad(window_b, "judge-b") / len(window_b) - _bad(baseline, "judge-a") / len(baseline) > 0.02
    assert mixed_p < ALPHA

    # a baseline for the new epoch at once: re-score the week with judge-b
    settings = load_settings()
    now = datetime.now(timezone.utc)
    state = backfill_traces(since=now - timedelta(days=8), until=now - timedelta(days=1), rescore=True, metrics=["toxicity"],
                            return_state=True)
    assert state.is_completed() and state.result().scored == len(baseline)
    from judgeflow.alerts.service import evaluate_rules

    [regression] = [e for e in evaluate_rules(settings) if e.rule == "toxicity_regression" and not e.segment]
    assert regression.outcome == "ok"
    assert (regression.baseline_sample_size, regression.baseline_violations) == (
        len(baseline), _bad(baseline, "judge-b"))
    assert _events(db) == []

    # a real rise within the new epoch still fires
    rise = _rows("rise", 60, days_ago=(0.3, 0.02), text=lambda i: f"You are hopeless {i} [toxic]" if i % 2 else
                 f"Reply rise {i} about order {i}")
    insert_traces(db, rise)
    _score()
    assert ("toxicity_regression", "", "fired") in _events(db)
    row = _alerts(db)[("toxicity_regression", "")]
    assert (row.sample_size, row.violations) == (len(window_b) + len(rise), _bad(window_b + rise, "judge-b"))


def test_a_new_metric_version_starts_an_epoch_like_a_new_judge(prefect_server, epochs_env, db, monkeypatch):
    import judgeflow.metrics.toxicity.metric as toxicity_metric

    insert_traces(db, _rows("base", 60, days_ago=(7.0, 1.5)) + _rows("win", 30, days_ago=(0.9, 0.1)))
    _score()
    before = toxicity_metric.toxicity_version()
    rows = _alerts(db)
    assert rows[("toxicity_rate", "")].last_outcome == "ok"

    # an edited prompt: the same judge, a new metric version
    monkeypatch.setattr(toxicity_metric, "MAJOR_VERSION", toxicity_metric.MAJOR_VERSION + 100)
    after = toxicity_metric.toxicity_version()
    assert after != before
    insert_traces(db, _rows("new", 5, days_ago=(0.05, 0.01)))
    # through the command: the change is said once in all it prints (the summary's "Judge changed.", each
    # metric's new epoch under it; the epoch's log line is info, under the terminal's warnings-only level)
    from typer.testing import CliRunner

    from judgeflow.cli import app

    result = CliRunner().invoke(app, ["score", "--metric", "toxicity"])
    assert result.exit_code == 0, result.output
    assert result.output.lower().count("judge changed") == 1, result.output
    assert result.output.count("new judge epoch for toxicity") == 1, result.output
    [epoch_line] = [line for line in result.output.splitlines() if line.startswith("- new judge epoch")]
    assert f"metric version {before} -> {after}" in epoch_line
    with db.connect() as conn:
        epochs = conn.execute(sa.text(
            "SELECT metric_version, judge_model FROM judgeflow.judge_epochs WHERE metric = 'toxicity' ORDER BY id"
        )).all()
    assert [tuple(e) for e in epochs] == [(before, "openai/judge-a"), (after, "openai/judge-a")]
    rows = _alerts(db)
    assert rows[("toxicity_rate", "")].last_outcome == "insufficient_data"
    assert rows[("toxicity_rate", "")].sample_size == 5
    assert rows[("toxicity_regression", "")].last_outcome == "insufficient_data"
