"""The result rollup equals the results: after every kind of write, two
writers at once, a crash mid-write, a judge epoch change, sample decisions
changing, the build of an upgraded database's older hours, and real scoring
runs (a backfill with --rescore, a new judge model). ``differences`` is what
`db check --full` reports: every line of the rollup against the results
counted again; the figures are also compared with those counted from the
results alone (the rollup set aside)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from judgeflow.alerts.evaluation import read_evaluation_counts
from judgeflow.alerts.rules import all_rules
from judgeflow.db import migrate
from judgeflow.status.check import CheckReport, _check_rollup
from judgeflow.db.epochs import record_epochs
from judgeflow.db.rollup import build, compact_rollup, differences, rollup_state, start_over
from judgeflow.metrics.registry import metric_names
from tests.alerts.helpers import make_settings, migrated
from tests.alerts.raw_figures import raw_figures

NOW = datetime.now(timezone.utc)
SOURCE = "table:llm_traces@results-db"

_INSERT = sa.text(
    """
    INSERT INTO judgeflow.eval_results AS r
        (trace_id, metric, metric_version, status, score, passed, trace_created_at, segment, source, scored_at)
    SELECT 't-' || g, CASE WHEN g % 3 = 0 THEN 'hallucination' ELSE 'toxicity' END, :version,
           CASE WHEN g % 17 = 0 THEN 'failed' WHEN g % 29 = 0 THEN 'skipped' ELSE 'scored' END,
           (g % 10) / 10.0, CASE WHEN g % 17 = 0 OR g % 29 = 0 THEN NULL ELSE g % 7 <> 0 END,
           now() - make_interval(mins => (g * 37) % (9 * 24 * 60)),
           jsonb_build_object('app', 'app-' || (g % 5), 'model', 'm-' || (g % 3)),
           CASE WHEN g % 11 = 0 THEN NULL ELSE :source END, now()
    FROM generate_series(CAST(:lo AS int), CAST(:hi AS int)) g
    ON CONFLICT (trace_id, metric) DO UPDATE SET
        status = excluded.status, passed = NOT coalesce(r.passed, false), score = excluded.score,
        metric_version = excluded.metric_version, scored_at = now(), segment = excluded.segment
    """
)


def _write(engine: sa.Engine, lo: int, hi: int, *, version: str = "v1") -> None:
    with engine.begin() as conn:
        conn.execute(_INSERT, {"lo": lo, "hi": hi, "version": version, "source": SOURCE})


def _rules(database_url: str):
    settings = make_settings(database_url, alert_segment_by="app,model", alert_segment_top=3,
                             toxicity_regression_min_increase=0.02, hallucination_regression_min_increase=0.02)
    return [r for r in all_rules(settings) if r.kind not in ("dead_deliveries", "unwritten_results")]


def _figures(engine: sa.Engine, rules, *, from_results: bool = False) -> dict:
    with engine.connect() as conn, conn.begin():
        if from_results:  # the rollup set aside: every hour from eval_results
            conn.execute(sa.text("UPDATE judgeflow.rollup_state SET built_from = '9999-01-01'"))
        counts = read_evaluation_counts(conn, rules, now=NOW)
        conn.rollback()
    return {(r.name, f.segment.label): f for r in rules for key in (None, *r.segment_by)
            for f in counts.figures(r, key=key)}


def _same(a, b) -> bool:
    """Two figures equal up to the last bits of a float sum (the classes' order differs)."""
    (exact_a, floats_a), (exact_b, floats_b) = _fields(a), _fields(b)
    if exact_a != exact_b or [x is None for x in floats_a] != [x is None for x in floats_b]:
        return False
    return [x for x in floats_a if x is not None] == pytest.approx([x for x in floats_b if x is not None],
                                                                   rel=1e-9, abs=1e-12)


def _fields(f):
    e, be = f.estimate, f.baseline_estimate
    return ((f.segment, f.sample_size, f.violations, f.failed, f.baseline_sample_size, f.baseline_violations,
             f.other_epoch, f.other_epoch_baseline, f.epoch_started_at, e.judged, e.eff_n, e.eff_bad, e.sampled,
             be.judged, be.sampled),
            (f.value, f.ci_low, f.ci_high, f.baseline_value, f.p_value, e.traces, e.n_eff, e.interval_n,
             be.ci_low, be.ci_high, be.n_eff, be.interval_n))


def assert_exact(engine: sa.Engine, rules=None) -> None:
    """The rollup's lines equal the results counted again (`db check --full`), and
    every rule's figures from the rollup equal those from the rollup set aside
    and those of the statements that counted the results before it existed."""
    with engine.connect() as conn:
        assert differences(conn) == []
    if rules is not None:
        from_rollup = _figures(engine, rules)
        assert from_rollup == _figures(engine, rules, from_results=True)
        with engine.connect() as conn:
            reference = {(r.name, f.segment.label): f for r in rules for key in (None, *r.segment_by)
                         for f in raw_figures(conn, r, now=NOW, key=key)}
        assert from_rollup.keys() == reference.keys()
        wrong = [k for k in reference if not _same(from_rollup[k], reference[k])]
        assert wrong == [], (wrong[:3], [(_fields(from_rollup[k]), _fields(reference[k])) for k in wrong[:1]])
        assert any(f.sample_size or f.other_epoch for f in from_rollup.values())  # something was counted


def test_every_kind_of_write_leaves_the_rollup_equal_to_the_results(db, database_url):
    engine = migrated(db)
    rules = _rules(database_url)
    _write(engine, 0, 3000)
    assert_exact(engine, rules)
    _write(engine, 2000, 4000)  # re-scores of a third: an update flips passed, then new rows
    assert_exact(engine, rules)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE judgeflow.eval_results SET source = :s WHERE source IS NULL"), {"s": SOURCE})
        conn.execute(sa.text("UPDATE judgeflow.eval_results SET segment = '{\"app\": \"moved\"}' "
                             "WHERE trace_id LIKE 't-1%'"))
        conn.execute(sa.text("UPDATE judgeflow.eval_results SET segment = '\"not an object\"' "
                             "WHERE trace_id LIKE 't-2%'"))
        conn.execute(sa.text("DELETE FROM judgeflow.eval_results WHERE trace_id LIKE 't-3%'"))
    assert_exact(engine, rules)
    # sample weights: decided after the results were written, then re-weighed, then removed
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO judgeflow.sample_decisions (trace_id, night, stratum, inclusion_prob, selected, created_at) "
            "SELECT 't-' || g, current_date, 's', 0.25, true, now() FROM generate_series(0, 4000, 2) g"))
    assert_exact(engine, rules)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE judgeflow.sample_decisions SET inclusion_prob = 0.1 WHERE trace_id LIKE 't-4%'"))
        conn.execute(sa.text("DELETE FROM judgeflow.sample_decisions WHERE trace_id LIKE 't-5%'"))
    assert_exact(engine, rules)
    _write(engine, 3500, 4500)  # new results of traces already decided: weighed at once
    assert_exact(engine, rules)
    with engine.connect() as conn:
        deltas = conn.execute(sa.text("SELECT count(*) FROM judgeflow.result_rollup WHERE NOT folded")).scalar()
    assert deltas > 0
    assert compact_rollup(engine) > 0
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.result_rollup WHERE NOT folded")).scalar() == 0
    assert_exact(engine, rules)
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE judgeflow.eval_results"))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.result_rollup")).scalar() == 0


def test_two_writers_and_a_judge_change_at_once_leave_it_exact(db, database_url):
    engine = migrated(db)
    rules = _rules(database_url)
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for i in range(6):  # overlapping ranges: each re-scores the other's rows
                _write(engine, offset + i * 50, offset + i * 50 + 300, version=f"v{i % 2}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def judge_changes() -> None:
        try:
            for i in range(3):
                with engine.begin() as conn:
                    record_epochs(conn, SOURCE, {m: (f"v{i % 2}", f"judge-{i}") for m in metric_names()})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(0,)), threading.Thread(target=writer, args=(200,)),
               threading.Thread(target=judge_changes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.judge_epochs")).scalar() == 6
    assert_exact(engine, rules)


def test_a_crash_mid_write_leaves_nothing_behind(db, database_url):
    engine = migrated(db)
    rules = _rules(database_url)
    _write(engine, 0, 1000)
    before = _figures(engine, rules)
    victim = engine.connect()
    victim.begin()
    victim.execute(_INSERT, {"lo": 500, "hi": 2500, "version": "v1", "source": SOURCE})
    pid = victim.execute(sa.text("SELECT pg_backend_pid()")).scalar()
    with engine.connect() as conn:  # the writer's deltas are written, not committed: the server goes away under it
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
    with pytest.raises(sa.exc.DBAPIError):
        victim.execute(sa.text("SELECT 1"))
    victim.invalidate()
    assert_exact(engine, rules)
    assert _figures(engine, rules) == before


def test_a_write_in_flight_when_a_judge_epoch_is_recorded_is_counted_in_its_epoch(db, database_url):
    engine = migrated(db)
    rules = _rules(database_url)
    _write(engine, 0, 600)
    with engine.begin() as conn:
        record_epochs(conn, SOURCE, {m: ("v1", "judge-a") for m in metric_names()})
    # a write whose transaction started after the new epoch's start, and whose
    # rows are in before the epoch is recorded: the recording waits for it, then recomputes
    writer = engine.connect()
    writer.begin()
    writer.execute(_INSERT, {"lo": 600, "hi": 900, "version": "v1", "source": SOURCE})
    recorded = threading.Event()

    def change() -> None:
        with engine.begin() as conn:
            record_epochs(conn, SOURCE, {m: ("v1", "judge-b") for m in metric_names()})
        recorded.set()

    t = threading.Thread(target=change)
    t.start()
    assert not recorded.wait(1.0)  # held until the write commits
    writer.commit()
    writer.close()
    t.join()
    assert_exact(engine, rules)
    # and a write that started before the epoch and writes after it: its rows are the old epoch's
    late = engine.connect()
    late.begin()
    late.execute(sa.text("SELECT now()"))
    with engine.begin() as conn:
        record_epochs(conn, SOURCE, {m: ("v1", "judge-c") for m in metric_names()})
    late.execute(_INSERT, {"lo": 900, "hi": 1200, "version": "v1", "source": SOURCE})
    late.commit()
    late.close()
    assert_exact(engine, rules)
    figures = _figures(engine, rules)
    assert figures[("toxicity_rate", "")].other_epoch > 0  # the old epochs' results are counted apart


def test_an_upgraded_database_builds_its_older_hours_in_steps(empty_db, empty_database_url):
    engine = empty_db
    migrate.upgrade(engine, "0015")
    _write(engine, 0, 3000)  # results from before the rollup existed
    migrate.upgrade(engine)
    rules = _rules(empty_database_url)
    with engine.connect() as conn:
        state = rollup_state(conn)
        assert conn.execute(sa.text("SELECT count(*) FROM judgeflow.result_rollup")).scalar() == 0
    assert not state.built and state.hours_left() >= 9 * 24
    # meanwhile: exact all the same (the hours not built are read from the results), and new writes are kept
    _write(engine, 2500, 3500)
    assert _figures(engine, rules) == _figures(engine, rules, from_results=True)
    steps = []
    done = threading.Event()

    def keep_writing() -> None:
        i = 0
        while not done.is_set():
            _write(engine, 3500 + i * 20, 3520 + i * 20)
            i += 1

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        build(engine, hours=24, progress=steps.append)
    finally:
        done.set()
        writer.join()
    assert len(steps) >= 9 and steps[-1].done
    assert [s.hours_left for s in steps] == sorted((s.hours_left for s in steps), reverse=True)
    with engine.connect() as conn:
        assert rollup_state(conn).built
    assert_exact(engine, rules)


def test_db_check_says_whether_the_rollup_is_current_and_full_finds_a_wrong_line(db, database_url):
    engine = migrated(db)
    _write(engine, 0, 500)
    report = CheckReport()
    _check_rollup(report, engine, full=True)
    assert report.ok and any("every line equal" in m for _, m in report.findings), report.lines()
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE judgeflow.result_rollup SET n = n + 1 WHERE ctid IN "
                             "(SELECT ctid FROM judgeflow.result_rollup WHERE seg_key = 'app' LIMIT 1)"))
    report = CheckReport()
    _check_rollup(report, engine, full=True)
    assert not report.ok and "differs from the results in 1 line(s)" in report.lines()[-1], report.lines()
    start_over(engine)
    report = CheckReport()
    _check_rollup(report, engine, full=False)
    assert any("run `judgeflow db rollup`" in m for _, m in report.findings), report.lines()
    build(engine)
    assert_exact(engine, _rules(database_url))


# the 100,000 values behind `--slow` (about 25 s on the shared machine);
# 12,000 (above db check's 10,000) in the default run
@pytest.mark.parametrize("values", [12_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_a_segment_key_of_a_hundred_thousand_values_stays_one_line_per_value(db, database_url, values):
    engine = migrated(db)
    with engine.begin() as conn:
        conn.execute(sa.text(
            """
            INSERT INTO judgeflow.eval_results (trace_id, metric, status, passed, trace_created_at, segment, source)
            SELECT 'u-' || g, 'toxicity', 'scored', g % 9 <> 0, date_trunc('hour', now()) - interval '2 hours',
                   jsonb_build_object('user', 'user-' || g, 'app', 'app-' || (g % 4)), :s
            FROM generate_series(1, :values) g
            """
        ), {"s": SOURCE, "values": values})
    with engine.connect() as conn:
        lines = dict(conn.execute(sa.text(
            "SELECT seg_key, count(*) FROM judgeflow.result_rollup GROUP BY 1")).all())
    # overall: passed or not; app: 4 values x 2; user: one line per value (each has one result):
    # one line per (key, value, hour, status, passed), never one per combination of keys
    assert lines == {"": 2, "app": 8, "user": values}
    report = CheckReport()
    _check_rollup(report, engine, full=False)
    assert any(f"segment key 'user' has {values:,} values" in m for level, m in report.findings if level == "warn")
    settings = make_settings(database_url, alert_segment_by="user", alert_segment_top=10)
    rule = next(r for r in all_rules(settings) if r.name == "toxicity_rate")
    with engine.connect() as conn:
        counts = read_evaluation_counts(conn, [rule], now=NOW)
    per_user = counts.figures(rule, key="user")
    assert len(per_user) == 11 and [f.segment.is_other for f in per_user].count(True) == 1
    assert per_user[0].segment.is_other and per_user[0].sample_size == values - 10  # the largest: listed first
    assert sum(f.sample_size for f in per_user) == counts.figures(rule)[0].sample_size == values


@pytest.mark.usefixtures("prefect_server")
def test_real_runs_a_rescore_and_a_new_judge_leave_it_exact(judgeflow_env, db, monkeypatch):
    from judgeflow.flows.backfill import backfill_traces
    from judgeflow.flows.scoring import score_new_traces
    from tests.support.traces import insert_traces

    migrate.upgrade(db)
    monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
    monkeypatch.setenv("JUDGEFLOW_SOURCE_LOOKBACK", "48h")
    now = datetime.now(timezone.utc)
    insert_traces(db, [{"id": f"r-{i}", "created_at": now - timedelta(hours=1 + i % 30),
                        "output": f"Reply {i}" + (" you idiot" if i % 5 == 0 else ""),
                        "metadata": {"app": "ab"[i % 2]}} for i in range(40)])
    assert score_new_traces(metrics=["toxicity"], batch_size=10).scored == 40
    assert_exact(db)
    rescored = backfill_traces(since=now - timedelta(days=2), until=now, rescore=True, metrics=["toxicity"])
    assert rescored.scored == 40
    assert_exact(db)
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/judge-other")
    insert_traces(db, [{"id": f"s-{i}", "created_at": now - timedelta(minutes=30), "output": f"Later {i}",
                        "metadata": {"app": "a"}} for i in range(10)])
    changed = score_new_traces(metrics=["toxicity"], batch_size=10)
    assert changed.scored == 10 and len(changed.judge_epochs) == 1
    assert_exact(db)
    with db.connect() as conn:
        epochs = conn.execute(sa.text("SELECT count(DISTINCT epoch_mark) FROM judgeflow.result_rollup")).scalar()
    assert epochs == 2


def test_a_large_tables_window_index_is_rebuilt_concurrently_by_db_rollup(db, database_url):
    """A table too large for the migration to rebuild its window index keeps the
    old one (db check warns, the cut hours are read from the table) until
    `judgeflow db rollup` builds the covering one concurrently."""
    from judgeflow.db.rollup import cover_window_index, window_index_covers

    engine = migrated(db)
    _write(engine, 0, 400)
    with engine.begin() as conn:  # the index as migration 09_judge_epochs.py left it
        conn.execute(sa.text("DROP INDEX judgeflow.eval_results_metric_created_idx"))
        conn.execute(sa.text("CREATE INDEX eval_results_metric_created_idx ON judgeflow.eval_results "
                             "(metric, trace_created_at) INCLUDE (status, passed, segment, metric_version, scored_at)"))
        assert not window_index_covers(conn)
    report = CheckReport()
    _check_rollup(report, engine, full=False)
    assert any("window index lacks source and trace id" in m for level, m in report.findings if level == "warn")
    assert_exact(engine, _rules(database_url))  # exact either way
    assert cover_window_index(engine) is True
    with engine.connect() as conn:
        assert window_index_covers(conn)
        valid = conn.execute(sa.text(
            "SELECT bool_and(i.indisvalid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname LIKE 'eval_results_%'")).scalar()
    assert valid
    assert cover_window_index(engine) is False  # nothing left to do
    report = CheckReport()
    _check_rollup(report, engine, full=False)
    assert not any("window index" in m for _, m in report.findings)
