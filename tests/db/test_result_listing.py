"""`judgeflow results`' SQL: each filter selects what it names, newest first, through an index."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from judgeflow.db.result_listing import ResultFilter, list_results, listing_sql, stored_metrics
from tests.support.traces import BASE_TIME

SOURCE = "table:public.llm_traces@results-db"


def _insert(db, rows: list[dict]) -> None:
    with db.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, status, score, passed, reason, error, "
            "trace_created_at, segment, source) VALUES (:trace_id, :metric, :status, :score, :passed, :reason, "
            ":error, :at, CAST(:segment AS jsonb), :source)"), rows)


def _row(i: int, metric: str, outcome: str, *, app: str = "chat", source: str = SOURCE) -> dict:
    status = {"pass": "scored", "fail": "scored", "error": "failed", "skipped": "skipped"}[outcome]
    return {"trace_id": f"t{i:03d}", "metric": metric, "status": status,
            "score": {"pass": 0.1, "fail": 0.9}.get(outcome), "passed": {"pass": True, "fail": False}.get(outcome),
            "reason": f"reason {i}" if status == "scored" else None, "error": "boom" if status == "failed" else None,
            "at": BASE_TIME + timedelta(hours=i), "segment": f'{{"app": "{app}"}}', "source": source}


def _ids(rows) -> list[tuple[str, str]]:
    return [(r["trace_id"], r["metric"]) for r in rows]


def test_each_filter_selects_what_it_names_newest_first(db):
    _insert(db, [
        _row(1, "toxicity", "pass"), _row(2, "toxicity", "fail", app="search"), _row(3, "toxicity", "error"),
        _row(4, "hallucination", "fail"), _row(5, "hallucination", "skipped"),
        _row(6, "toxicity", "fail", source="phoenix:spans@results-db"),
    ])
    with db.connect() as conn:
        assert stored_metrics(conn) == ["hallucination", "toxicity"]
        every = list_results(conn, ResultFilter())
        assert _ids(every) == [("t006", "toxicity"), ("t005", "hallucination"), ("t004", "hallucination"),
                               ("t003", "toxicity"), ("t002", "toxicity"), ("t001", "toxicity")]
        assert _ids(list_results(conn, ResultFilter(kind="failed"))) == [
            ("t006", "toxicity"), ("t004", "hallucination"), ("t002", "toxicity")]
        assert _ids(list_results(conn, ResultFilter(kind="errors"))) == [("t003", "toxicity")]
        assert _ids(list_results(conn, ResultFilter(metrics=("toxicity",), kind="failed", source="table"))) == [
            ("t002", "toxicity")]
        assert _ids(list_results(conn, ResultFilter(source="phoenix"))) == [("t006", "toxicity")]
        assert _ids(list_results(conn, ResultFilter(segment={"app": "search"}))) == [("t002", "toxicity")]
        window = ResultFilter(since=BASE_TIME + timedelta(hours=2), until=BASE_TIME + timedelta(hours=4))
        assert _ids(list_results(conn, window)) == [("t003", "toxicity"), ("t002", "toxicity")]
        assert _ids(list_results(conn, ResultFilter(limit=2))) == [("t006", "toxicity"), ("t005", "hallucination")]


def test_a_source_kind_is_matched_literally(db):
    _insert(db, [_row(1, "toxicity", "pass", source="tab_e:x@results-db")])
    with db.connect() as conn:
        assert list_results(conn, ResultFilter(source="table")) == []  # '_' is no wildcard
        assert len(list_results(conn, ResultFilter(source="tab_e"))) == 1


def _plan(conn, wanted: ResultFilter, metrics: list[str]) -> str:
    sql, params = listing_sql(wanted, metrics)
    compiled = sql.compile(conn, compile_kwargs={"render_postcompile": True})
    return "\n".join(conn.exec_driver_sql(f"EXPLAIN {compiled.string}", compiled.construct_params(params)).scalars())


def test_every_kind_is_served_by_an_index_walked_newest_first(db):
    _insert(db, [_row(i, "toxicity", ("pass", "fail", "error")[i % 3]) for i in range(30)])
    with db.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")  # a table of 30 rows: ask whether an index can serve it
        conn.exec_driver_sql("SET enable_bitmapscan = off")
        for kind, index in (("all", "eval_results_metric_created_idx"), ("failed", "eval_results_not_passed_idx"),
                            ("errors", "eval_results_errors_idx")):
            plan = _plan(conn, ResultFilter(kind=kind, since=BASE_TIME), ["toxicity", "hallucination"])
            # each metric's rows come off the index newest first and stop at the limit: no sort of the table
            assert plan.count(f"Scan Backward using {index}") == 2, plan
