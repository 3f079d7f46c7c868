"""Counting at scale: one read per evaluation, the plans and the time.

An evaluation reads its counts once (judgeflow/db/rollup.py ``read_counts``),
in one statement: the whole trace hours of every rule's periods from
``judgeflow.result_rollup``, and the smaller side of each hour a period
boundary cuts from ``eval_results`` through its ``(metric, trace_created_at)``
index. The default run checks, on 60k generated results over half a year,
that an evaluation of every rule and segment key makes exactly that one read,
with no sequential scan of eval_results, and that the figures equal those
counted from the results alone;
the slow run generates a million over 90 days (``generate_series``) and prints
the plans with their timings.
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from judgeflow.alerts.evaluation import read_evaluation_counts, segment_figures
from judgeflow.alerts.rules import all_rules
from judgeflow.alerts.service import evaluate_rules
from tests.alerts.helpers import make_settings, migrated

# Results spread over ``days`` days (two metrics per trace), 12 apps with skewed
# volumes, 3 models, ~5% not passed, 1% failed, a realistic reason text; written
# oldest trace first, as runs claim them (written newest first, each insert
# lands at the index's left end and splits its pages in half: the 1M index
# grew to 207 MB instead of 117 MB and the planner chose a sequential scan).
GENERATE = """
INSERT INTO judgeflow.eval_results
    (trace_id, metric, status, score, passed, threshold, reason, details, trace_created_at, scored_at, segment)
SELECT 'gen-' || (g / 2), CASE WHEN g % 2 = 0 THEN 'toxicity' ELSE 'hallucination' END,
       CASE WHEN g % 100 = 7 THEN 'failed' ELSE 'scored' END,
       CASE WHEN g % 100 = 7 THEN NULL ELSE (g % 20) / 20.0 END,
       CASE WHEN g % 100 = 7 THEN NULL ELSE (g % 20) <> 3 END,
       0.5,
       'The output contains an opinion about the user that is ' || (g % 97) || ' words of judge explanation',
       jsonb_build_object('opinions', g % 5),
       now() - make_interval(secs => ((:n - 1 - g)::float8 / :n) * :days * 86400),
       now(),
       jsonb_build_object('app', 'app-' || (floor(12 * power(((g::bigint * 7919) % 1000) / 1000.0, 2)))::int,
                          'model', 'model-' || (g % 3))
FROM generate_series(0, :n - 1) AS g
"""


def _generate(engine: sa.Engine, n: int, days: int) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(GENERATE), {"n": n, "days": days})
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        # what autovacuum does to an insert-only table: the visibility map makes
        # the range scan index-only
        conn.exec_driver_sql("VACUUM ANALYZE judgeflow.eval_results")


@contextmanager
def _statements(engine: sa.Engine):
    """The statements run on ``engine`` meanwhile that read the results or the rollup, with their parameters."""
    sent: list[tuple[str, object]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if "judgeflow.eval_results" in statement or "judgeflow.result_rollup" in statement:
            sent.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", capture)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", capture)


def _plans(engine: sa.Engine, sent, *, analyze: bool = False) -> list[str]:
    explain = "EXPLAIN (ANALYZE, BUFFERS) " if analyze else "EXPLAIN "
    with engine.connect() as conn:
        return ["\n".join(r[0] for r in conn.exec_driver_sql(explain + statement, parameters))
                for statement, parameters in sent]


def _evaluation_reads(engine: sa.Engine, rules, now, *, analyze: bool = False):
    """The statements one evaluation of ``rules`` reads its counts with, their plans, and the counts."""
    with _statements(engine) as sent, engine.connect() as conn:
        counts = read_evaluation_counts(conn, list(rules), now=now)
    return sent, _plans(engine, sent, analyze=analyze), counts


def _from_results(engine: sa.Engine, rules, now):
    """The same counts with the rollup set aside: every hour read from eval_results."""
    with engine.connect() as conn, conn.begin():
        conn.execute(sa.text("UPDATE judgeflow.rollup_state SET built_from = '9999-01-01'"))
        counts = read_evaluation_counts(conn, list(rules), now=now)
        conn.rollback()
    return counts


def _figures(counts, rules) -> dict:
    return {(r.name, f.segment.label): f for r in rules for key in (None, *r.segment_by)
            for f in counts.figures(r, key=key)}


def _rules(database_url):
    settings = make_settings(
        database_url, alert_segment_by="app,model", toxicity_regression_min_increase=0.02,
        hallucination_regression_min_increase=0.02, hallucination_rate_max=0.5, failure_rate_max=0.5,
    )
    return settings, {r.name: r for r in all_rules(settings)}


def _assert_no_results_scan(sent, plans: list[str]) -> None:
    """One statement reads the rollup and the results' cut hours; the results
    read through the window index on both its columns, never sequentially."""
    assert len(sent) == 1, [st for st, _ in sent]
    (statement, _), = sent
    assert "judgeflow.result_rollup" in statement and "judgeflow.eval_results" in statement
    for plan in plans:
        assert not re.search(r"Seq Scan on eval_results", plan), plan
    results_plan = plans[0]
    assert re.search(r"(Index Only Scan|Index Scan|Bitmap Index Scan) (Backward )?(using|on) "
                     r"eval_results_metric_created_idx", results_plan), results_plan
    cond = next(line for line in results_plan.splitlines() if "Index Cond" in line and "trace_created_at" in line)
    assert "metric" in cond and "trace_created_at" in cond, results_plan


def test_an_evaluation_reads_the_rollup_once_and_no_results_sequentially(db, database_url):
    engine = migrated(db)
    _generate(engine, 60_000, days=180)  # half a year: the window and baseline are 4% of it
    settings, rules = _rules(database_url)
    counted = [r for r in rules.values() if r.kind not in ("dead_deliveries", "unwritten_results")]
    with engine.connect() as conn:
        now = conn.execute(sa.select(sa.func.now())).scalar_one()
    sent, plans, counts = _evaluation_reads(engine, counted, now)
    for plan in plans:
        print(f"\n{plan}")
    _assert_no_results_scan(sent, plans)
    # every figure of every rule and segment equals the one counted from the results alone
    assert _figures(counts, counted) == _figures(_from_results(engine, counted, now), counted)

    # with a judge epoch in force the rollup keeps each line's epoch: still two reads, no scan
    from judgeflow.db.epochs import record_epochs

    with engine.begin() as conn:
        record_epochs(conn, rules["toxicity_regression"].source,
                      {"toxicity": ("v1", "judge"), "hallucination": ("h1", "judge")})
    sent, plans, counts = _evaluation_reads(engine, counted, now)
    _assert_no_results_scan(sent, plans)
    assert _figures(counts, counted) == _figures(_from_results(engine, counted, now), counted)
    with engine.begin() as conn:  # the rest of this test counts every result
        conn.execute(sa.text("DELETE FROM judgeflow.judge_epochs"))
    with engine.connect() as conn:
        apps = segment_figures(conn, rules["toxicity_regression"], now=now, key="app")
    # 12 apps, top 10 by volume, the two smallest as 'other'; counts add up to overall
    assert len(apps) == 11 and sum(f.segment.is_other for f in apps) == 1
    with engine.connect() as conn:
        overall = segment_figures(conn, rules["toxicity_regression"], now=now)[0]
    assert sum(f.sample_size for f in apps) == overall.sample_size > 0
    assert sum(f.baseline_sample_size for f in apps) == overall.baseline_sample_size > 0


@pytest.mark.slow
def test_a_million_results_every_rule_per_segment(db, database_url):
    engine = migrated(db)
    started = time.perf_counter()
    _generate(engine, 1_000_000, days=90)
    generated = time.perf_counter() - started
    settings, rules = _rules(database_url)
    counted = [r for r in rules.values() if r.kind not in ("dead_deliveries", "unwritten_results")]
    with engine.connect() as conn:
        now = conn.execute(sa.select(sa.func.now())).scalar_one()
    sent, plans, _ = _evaluation_reads(engine, counted, now, analyze=True)
    print(f"\n1M results generated (rollup kept by the trigger) and vacuumed in {generated:.1f}s")
    for plan in plans:
        print(plan)
    _assert_no_results_scan(sent, plans)

    started = time.perf_counter()
    results = evaluate_rules(settings, engine=engine)
    elapsed = time.perf_counter() - started
    rows = len(results)
    print(f"evaluate_rules: 5 rules x (overall + app + model) = {rows} (rule, segment) evaluations in {elapsed:.2f}s")
    # 5 rules, each overall + 11 app segments + 3 model segments; dead_delivery_rate overall only
    assert rows == 5 * (1 + 11 + 3) + 1

    # the same with a judge epoch in force for each metric, started before every result (so the
    # counts are the same): recording it recomputes the hours scored since (all of them here)
    from judgeflow.db.epochs import record_epochs

    started = time.perf_counter()
    with engine.begin() as conn:
        record_epochs(conn, rules["toxicity_regression"].source,
                      {"toxicity": ("v1", "judge"), "hallucination": ("h1", "judge")})
        conn.execute(sa.text("UPDATE judgeflow.judge_epochs SET started_at = now() - interval '1 year'"))
    print(f"judge epochs recorded and moved back a year (every hour recomputed) in "
          f"{time.perf_counter() - started:.1f}s")
    started = time.perf_counter()
    with_epochs = evaluate_rules(settings, engine=engine)
    epoch_elapsed = time.perf_counter() - started
    print(f"evaluate_rules with judge epochs in force: {len(with_epochs)} evaluations in {epoch_elapsed:.2f}s")
    # the same counts, but for the window's edge having moved on since the first evaluation
    before = {(r.rule, tuple(sorted(r.segment.items()))): r.sample_size for r in results}
    after = {(r.rule, tuple(sorted(r.segment.items()))): r.sample_size for r in with_epochs}
    assert set(after) == set(before)
    assert all(abs(after[k] - before[k]) <= 5 for k in before)
    # a rollup read: well under the seconds a scan of a million results took per rule and key
    assert epoch_elapsed < 30
    assert elapsed < 30
