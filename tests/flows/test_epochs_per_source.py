"""Judge epochs per source through the real scoring flow (issue 47): two sources judged by
different judges write into one results database, taking turns. Each keeps its own judge
epochs and baseline: no run announces a "judge changed" the other source's judge caused,
no rule says "insufficient data: judge changed", and `status` shows each source's rates.
A real change of one source's judge starts an epoch for that source alone.

Source A is the table in judgeflow's own database, judged offline; source B a table of
the same shape in another database, judged by the local judge server. Real PostgreSQL,
real Prefect, litellm over HTTP to the judge server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.db import migrate
from tests.support.postgres import create_database, drop_database
from tests.support.traces import insert_traces, scripted_trace

runner = CliRunner()
A = "table:llm_traces@results-db"


def _traces(prefix: str, start: int, n: int) -> list[dict]:
    """``n`` scripted traces created within the last hours (inside the alert window)."""
    now = datetime.now(timezone.utc)
    rows = []
    for i in range(start, start + n):
        row, _ = scripted_trace(i)
        rows.append({**row, "id": f"{prefix}-{i:04d}", "created_at": now - timedelta(hours=3, minutes=-i)})
    return rows


@pytest.fixture
def other_database(pg_server):
    name, url = create_database(pg_server)
    engine = sa.create_engine(url)
    yield engine, url, f"127.0.0.1:{pg_server.port}/{name}"
    engine.dispose()
    drop_database(pg_server, name)


def _as_a(monkeypatch) -> None:
    monkeypatch.delenv("JUDGEFLOW_SOURCE_DATABASE_URL", raising=False)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "offline")


def _as_b(monkeypatch, url: str) -> None:
    monkeypatch.setenv("JUDGEFLOW_SOURCE_DATABASE_URL", url)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/judge-test")


def _score():
    from judgeflow.flows.scoring import score_new_traces

    state = score_new_traces(metrics=["toxicity"], return_state=True)
    assert state.is_completed()
    return state.result()


def _epochs(db) -> list[tuple[str, str, str]]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(
            "SELECT source, metric, judge_model FROM judgeflow.judge_epochs ORDER BY source, metric, id"))]


def _outcomes(db, source: str) -> dict[str, str]:
    with db.connect() as conn:
        return dict(conn.execute(sa.text(
            "SELECT rule, last_outcome FROM judgeflow.alerts WHERE source = :s AND segment_key = '' "
            "AND last_outcome IS NOT NULL"), {"s": source}).all())


def test_two_sources_with_different_judges_keep_their_own_epochs_and_baselines(
        prefect_server, judgeflow_env, db, other_database, monkeypatch):
    from judgeflow.cli import app

    other, other_url, where = other_database
    b = f"table:llm_traces@{where}"
    migrate.upgrade(db)
    monkeypatch.setenv("JUDGEFLOW_ALERT_MIN_SAMPLES", "5")
    monkeypatch.setenv("JUDGEFLOW_ALERT_WINDOW", "7d")
    monkeypatch.setenv("JUDGEFLOW_ALERT_PREFECT_EVENTS", "false")
    monkeypatch.setenv("JUDGEFLOW_SOURCE_LOOKBACK", "24h")

    _as_a(monkeypatch)
    insert_traces(db, _traces("a", 0, 12))
    first_a = _score()
    assert (first_a.scored, first_a.failed) == (12, 0) and first_a.judge_epochs == []

    _as_b(monkeypatch, other_url)
    insert_traces(other, _traces("b", 0, 12))
    first_b = _score()
    assert (first_b.scored, first_b.failed) == (12, 0)
    assert first_b.judge_epochs == [] and "Judge changed" not in first_b.markdown()  # B's first epoch: no change

    _as_a(monkeypatch)
    insert_traces(db, _traces("a", 12, 8))
    second_a = _score()
    assert (second_a.scored, second_a.failed) == (8, 0)
    assert second_a.judge_epochs == [] and "Judge changed" not in second_a.markdown()
    assert sorted(_epochs(db)) == sorted([(A, "toxicity", "offline"), (b, "toxicity", "openai/judge-test")])
    # A's rules count all 20 of its traces: its baseline was not cut by B's runs
    outcomes = _outcomes(db, A)
    assert outcomes and "insufficient_data" not in outcomes.values(), outcomes
    with db.connect() as conn:
        counted = conn.execute(sa.text("SELECT sample_size FROM judgeflow.alerts WHERE source = :s "
                                       "AND rule = 'toxicity_rate' AND segment_key = ''"), {"s": A}).scalar()
    assert counted == 20
    assert "insufficient_data" not in _outcomes(db, b).values()
    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert "toxicity not-passed rate, last 7d: no judged results" not in status.stdout
    assert "toxicity not-passed rate, last 7d:" in status.stdout and "20 judged" in status.stdout
    listed = runner.invoke(app, ["alerts"])
    assert listed.exit_code == 0, listed.output
    assert "judge changed" not in listed.output

    # a real change of B's judge: an epoch of B's alone, announced once
    _as_b(monkeypatch, other_url)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/judge-b")
    insert_traces(other, _traces("b", 12, 4))
    switched = _score()
    [change] = switched.judge_epochs
    assert "judge model openai/judge-test -> openai/judge-b" in change
    assert [e for e in _epochs(db) if e[0] == A] == [(A, "toxicity", "offline")]
    assert _outcomes(db, b)["toxicity_rate"] == "insufficient_data"  # B's own 4 new results only
    _as_a(monkeypatch)  # A's rules evaluated after B's judge changed: A's epoch still holds
    checked = runner.invoke(app, ["alerts", "check"])
    assert checked.exit_code == 0, checked.output
    assert "judge changed" not in checked.output and "insufficient_data" not in _outcomes(db, A).values()
