"""judgeflow/db/labels.py against the real PostgreSQL: the population a draw is made from, a draw and
its items recorded, and labelled_sample reading one epoch's draws only."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from judgeflow.db import migrate
from judgeflow.db.labels import FAIL, PASS, labelled_sample, record_draw, scored_units, store_labels

T0 = datetime(2026, 11, 20, tzinfo=timezone.utc)
SOURCE = "table:llm_traces@results-db"


def seed_results(conn, rows, *, metric="toxicity", source=SOURCE, scored_at=T0, version=None):
    """``rows``: (trace_id, passed, segment) scored results."""
    conn.execute(sa.text(
        "INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed, reason, "
        "trace_created_at, scored_at, segment, source) VALUES (:t, :m, :v, 'scored', :score, :passed, 'why', "
        ":at, :scored_at, CAST(:seg AS jsonb), :source)"
    ), [{"t": t, "m": metric, "v": version, "score": 0.0 if passed else 1.0, "passed": passed, "at": T0,
         "scored_at": scored_at, "seg": json.dumps(seg or {}),
         "source": source} for t, passed, seg in rows])


def test_population_filters_source_segment_and_weights(db):
    migrate.upgrade(db)
    with db.begin() as conn:
        seed_results(conn, [("a", False, {"app": "chat"}), ("b", True, {"app": "chat"}), ("c", True, {"app": "x"})])
        seed_results(conn, [("z", False, {})], source="other")
        conn.execute(sa.text(
            "INSERT INTO judgeflow.sample_decisions (trace_id, night, stratum, inclusion_prob, selected) "
            "VALUES ('b', '2026-11-20', 's', 0.25, true)"))
        everything = scored_units(conn, SOURCE, "toxicity", in_epoch=("TRUE", {}))
        chat = scored_units(conn, SOURCE, "toxicity", in_epoch=("TRUE", {}), segment={"app": "chat"})
    assert [(u.trace_id, u.judged_fail, u.result_weight) for u in everything] == [
        ("a", True, 1.0), ("b", False, 4.0), ("c", False, 1.0)]
    assert [u.trace_id for u in chat] == ["a", "b"]


def test_labelled_sample_reads_one_epochs_draws_with_majority_labels(db):
    migrate.upgrade(db)
    with db.begin() as conn:
        seed_results(conn, [("a", False, {}), ("b", True, {}), ("c", True, {})])
        epochs = [conn.execute(sa.text(
            "INSERT INTO judgeflow.judge_epochs (source, metric, metric_version, judge_model, started_at) "
            "VALUES (:s, 'toxicity', 'v1', :model, :at) RETURNING id"
        ), {"s": SOURCE, "model": model, "at": T0 - timedelta(days=d)}).scalar_one() for model, d in (("m1", 9), ("m2", 1))]
        units = {u.trace_id: u for u in scored_units(conn, SOURCE, "toxicity", in_epoch=("TRUE", {}))}
        old = record_draw(conn, metric="toxicity", source=SOURCE, epoch_id=epochs[0], since=None, segment=None,
                          requested=1, seed=1, strata={FAIL: {"population": 1, "drawn": 1}},
                          items=[(units["a"], FAIL, 1.0)])
        new = record_draw(conn, metric="toxicity", source=SOURCE, epoch_id=epochs[1], since=None, segment=None,
                          requested=2, seed=2, strata={FAIL: {"population": 1, "drawn": 1},
                                                       PASS: {"population": 2, "drawn": 1}},
                          items=[(units["a"], FAIL, 1.0), (units["b"], PASS, 0.5)])
        store_labels(conn, [
            {"trace_id": "a", "metric": "toxicity", "label": True, "labeller": "", "draw_id": old},
            {"trace_id": "b", "metric": "toxicity", "label": False, "labeller": "ann", "draw_id": new},
            {"trace_id": "b", "metric": "toxicity", "label": True, "labeller": "bob", "draw_id": new},
            {"trace_id": "c", "metric": "toxicity", "label": True, "labeller": "", "draw_id": None},
        ])
        draws = labelled_sample(conn, SOURCE, "toxicity", epochs[1])
        older = labelled_sample(conn, SOURCE, "toxicity", epochs[0])
        none_for_segment = labelled_sample(conn, SOURCE, "toxicity", epochs[1], segment={"app": "chat"})
    assert [d.id for d in draws] == [new] and none_for_segment == []
    draw = draws[0]
    assert draw.population == 3
    assert {n: (s.population, s.drawn, s.labelled) for n, s in draw.strata.items()} == {
        FAIL: (1, 1, 0), PASS: (2, 1, 1)}
    # 'a' was labelled in the older epoch's draw only; 'c' is hand-picked; 'b' a tie: fails
    [b] = draw.items
    assert (b.trace_id, b.stratum, b.judged_fail, b.inclusion_prob, b.label, b.labellers, b.fail_votes) == (
        "b", PASS, False, 0.5, True, 2, 1)
    assert [i.trace_id for i in older[0].items] == ["a"]
