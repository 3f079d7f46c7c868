"""A backfill is a certainty phase, not a new probability for the whole
stratum; after a run the sample phase weighs what it stands for (issue 46).
Real PostgreSQL."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from judgeflow.db.schema import eval_results
from judgeflow.sampling.decisions import reweigh, settle
from tests.alerts.helpers import migrated

NIGHT = date(2026, 11, 20)
T0 = datetime(2026, 11, 20, 1, 0, tzinfo=timezone.utc)


def _decide(conn, n: int, every: int) -> None:
    conn.execute(sa.text(
        """
        INSERT INTO judgeflow.sample_decisions (trace_id, night, stratum, inclusion_prob, selected, created_at)
        SELECT 'b-' || i, :night, 'app=x', :p, i % :every = 0, CAST(:t0 AS timestamptz) + i * interval '1 minute'
        FROM generate_series(0, :n - 1) AS i
        """), {"night": NIGHT, "p": 1 / every, "every": every, "t0": T0, "n": n})


def _judge(conn, ids: list[int]) -> None:
    conn.execute(eval_results.insert(), [dict(
        trace_id=f"b-{i}", metric="toxicity", status="scored", score=0.0, passed=True, threshold=0.5,
        trace_created_at=T0 + timedelta(minutes=i), details={}, segment={"app": "x"}) for i in ids])


def _rows(conn) -> dict[int, sa.Row]:
    return {int(r.trace_id[2:]): r for r in conn.execute(sa.text("SELECT * FROM judgeflow.sample_decisions"))}


def test_a_partial_backfill_is_a_certainty_phase_and_the_rest_stays_a_sample(db):
    engine = migrated(db)
    with engine.begin() as conn:
        _decide(conn, 100, 10)
        _judge(conn, list(range(0, 100, 10)))  # the night's sample
        _judge(conn, [i for i in range(30) if i % 10])  # a backfill of the first half hour
        assert reweigh(conn) == 27
        rows = _rows(conn)
    span = range(1, 30)  # the backfilled traces' span: trace 0, selected before it, lies outside
    for i, r in rows.items():
        if i in span:
            assert (r.phase, r.selected, r.inclusion_prob) == ("certainty", True, 1.0), i
        else:
            assert r.phase == "sample" and r.selected == (i % 10 == 0), i
    sample = [r for r in rows.values() if r.phase == "sample"]
    judged = sum(1 for r in sample if r.selected)
    assert judged == 8 and len(sample) == 71
    assert all(r.inclusion_prob == pytest.approx(judged / len(sample)) for r in sample)


def test_settle_counts_selected_traces_left_unjudged_in_the_population(db):
    engine = migrated(db)
    with engine.begin() as conn:
        _decide(conn, 200, 4)  # 50 selected at 0.25
        _judge(conn, list(range(0, 120, 4)))  # the budget stopped after 30 of them
        settle(conn, [NIGHT])
        rows = _rows(conn)
    assert len(rows) == 200 and all(r.inclusion_prob == pytest.approx(30 / 200) for r in rows.values())
    # nothing judged keeps the planned probability (no weight from nothing)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM judgeflow.eval_results"))
        conn.execute(sa.text("UPDATE judgeflow.sample_decisions SET inclusion_prob = 0.25"))
        settle(conn, [NIGHT])
        assert {r.inclusion_prob for r in _rows(conn).values()} == {0.25}


def test_tonights_prices_are_what_judged_traces_billed_over_their_planned_cost(db):
    from judgeflow.sampling.decisions import MIN_TONIGHT, tonight_price_ratios

    engine = migrated(db)
    with engine.begin() as conn:
        _decide(conn, 40, 1)
        conn.execute(sa.text("UPDATE judgeflow.sample_decisions SET est_cost_usd = 0.002, "
                             "stratum = CASE WHEN trace_id < 'b-2' THEN 'app=y' ELSE 'app=x' END"))
        assert tonight_price_ratios(conn, NIGHT, 1) == {}
        conn.execute(eval_results.insert(), [dict(
            trace_id=f"b-{i}", metric="toxicity", status="scored", score=0.0, passed=True, threshold=0.5,
            trace_created_at=T0, details={}, segment={}, judge_calls=1, cost_usd=0.001 if i % 2 else 0.003)
            for i in range(40)])
        got = tonight_price_ratios(conn, NIGHT, 1)
        # every metric must be in: with two metrics, no trace is judged in full yet
        assert tonight_price_ratios(conn, NIGHT, 2) == {}
    strata = {s: sum(1 for i in range(40) if (f"b-{i}" < "b-2") == (s == "app=y")) for s in ("app=x", "app=y")}
    assert all(n >= MIN_TONIGHT for n in strata.values())
    assert got[None] == pytest.approx(1.0) and set(got) == {None, "app=x", "app=y"}


def test_the_late_share_is_what_later_runs_of_a_night_decided_and_their_selection_is_what_the_reserve_paid(db):
    from judgeflow.sampling.decisions import late_committed_usd, late_share

    engine = migrated(db)
    with engine.begin() as conn:
        _decide(conn, 40, 2)  # 20 selected
        conn.execute(sa.text("UPDATE judgeflow.sample_decisions SET est_cost_usd = 0.01, planned_by = "
                             "CASE WHEN trace_id IN ('b-0', 'b-1', 'b-2', 'b-3') THEN 'second' ELSE 'first' END"))
        conn.execute(sa.text("INSERT INTO judgeflow.sample_ledger (night, flow_run_id, budget_usd, spent_usd, "
                             "recorded_at) VALUES (:n, 'first', 1, 0, :t), (:n, 'second', 1, 0, :t2)"),
                     {"n": NIGHT, "t": T0, "t2": T0 + timedelta(hours=1)})
        assert late_share(conn, NIGHT + timedelta(days=1)) == pytest.approx(4 / 40)
        assert late_share(conn, NIGHT) is None  # only the nights before
        assert late_share(conn, NIGHT + timedelta(days=9)) is None  # only the last 7
        assert late_committed_usd(conn, NIGHT) == pytest.approx(0.02)  # b-0 and b-2 are selected


def test_a_runs_limit_leaves_what_the_late_reserve_still_holds():
    from judgeflow.sampling.planner import NightPlan

    plan = NightPlan(NIGHT, 10.0, 0.0, 30.0, True, spent_before_usd=3.0, reserve_usd=1.5)
    assert plan.run_limit_usd == pytest.approx(5.5)
    assert any("is held for traces that arrive after the night's plan" in n for n in plan.notes())
