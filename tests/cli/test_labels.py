"""`judgeflow labels sample | import | plan` against the real PostgreSQL, results seeded directly: the
draw's strata and inclusion probabilities, JSONL with nothing of the judge's, imports (happy, again,
broken: nothing stored, one line, exit 2), hand-picked labels, the plan's figures."""

from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.cli import app
from tests.support.traces import BASE_TIME, insert_traces

runner = CliRunner()
Z95 = 1.959963984540054
FAILED = {f"t{i:02}" for i in range(4)}  # the judge failed 4 of 40


@pytest.fixture
def seeded(judgeflow_env, db):
    """40 traces scored for toxicity in the epoch in force (4 failed), one scored before it; the
    source's identity as results record it; the epoch's id."""
    from judgeflow.db import migrate
    from judgeflow.run.metric_door import entry_settings
    from judgeflow.sources.identity import result_source

    migrate.upgrade(db)
    source = result_source(entry_settings())
    ids = [f"t{i:02}" for i in range(40)] + ["old"]
    insert_traces(db, [{"id": t, "created_at": BASE_TIME + timedelta(minutes=i), "input": f"q {t}",
                        "output": f"a {t}", "context": [f"c {t}"]} for i, t in enumerate(ids)])
    start = BASE_TIME + timedelta(days=1)
    with db.begin() as conn:
        epoch = conn.execute(sa.text(
            "INSERT INTO judgeflow.judge_epochs (source, metric, metric_version, judge_model, started_at) "
            "VALUES (:s, 'toxicity', 'v1', 'm', :at) RETURNING id"), {"s": source, "at": start}).scalar_one()
        conn.execute(sa.text(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, metric_version, status, score, passed, reason, "
            "trace_created_at, scored_at, segment, source) VALUES (:t, 'toxicity', 'v1', 'scored', :score, "
            ":passed, 'the judge says', :at, :scored, '{\"app\": \"chat\"}', :s)"),
            [{"t": t, "score": 0.9 if t in FAILED else 0.1, "passed": t not in FAILED,
              "at": BASE_TIME + timedelta(minutes=i), "s": source,
              "scored": start - timedelta(hours=1) if t == "old" else start + timedelta(hours=1)}
             for i, t in enumerate(ids)])
        # t05 was judged on a sampled night at probability 1/4: its weight is 4
        conn.execute(sa.text("INSERT INTO judgeflow.sample_decisions (trace_id, night, stratum, inclusion_prob, "
                             "selected) VALUES ('t05', '2026-11-21', 's', 0.25, true)"))
    return source, epoch


def _sample(tmp_path, *args: str):
    out = tmp_path / "to_label.jsonl"
    result = runner.invoke(app, ["labels", "sample", "--metric", "toxicity", "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in out.read_text().splitlines()], result


def _count(db, table: str) -> int:
    with db.connect() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM judgeflow.{table}")).scalar_one()


def test_sample_is_stratified_recorded_and_carries_nothing_of_the_judge(seeded, db, tmp_path):
    source, epoch = seeded
    lines, result = _sample(tmp_path, "--n", "10", "--seed", "3")
    # half to each verdict, the 4 failed all taken (capped), the remaining 6 from the 36 passed
    assert "fail 4 of 4, pass 6 of 36" in result.output and "seed 3" in result.output
    assert len(lines) == 10 and FAILED <= {line["id"] for line in lines} and "old" not in {x["id"] for x in lines}
    for line in lines:
        assert set(line) == {"id", "input", "output", "context", "labels"}, line  # no score, reason, verdict
        assert (line["input"], line["output"], line["context"], line["labels"]) == (
            f"q {line['id']}", f"a {line['id']}", [f"c {line['id']}"], {"toxicity": None})
    failed_at = [i for i, line in enumerate(lines) if line["id"] in FAILED]  # lines shuffled, strata mixed
    assert failed_at not in ([0, 1, 2, 3], [6, 7, 8, 9]), failed_at
    with db.connect() as conn:
        draw = conn.execute(sa.text("SELECT * FROM judgeflow.label_draws")).one()
        items = {r.trace_id: r for r in conn.execute(sa.text("SELECT * FROM judgeflow.label_draw_items"))}
    assert (draw.metric, draw.source, draw.epoch_id, draw.seed, draw.requested, draw.segment) == (
        "toxicity", source, epoch, 3, 10, {})
    assert draw.strata == {"fail": {"population": 4, "drawn": 4}, "pass": {"population": 36, "drawn": 6}}
    assert set(items) == {line["id"] for line in lines}
    for t, item in items.items():
        assert (item.stratum, item.judged_fail) == (("fail", True) if t in FAILED else ("pass", False))
        assert math.isclose(item.inclusion_prob, 1.0 if t in FAILED else 6 / 36)
        assert item.result_weight == (4.0 if t == "t05" else 1.0)
    # the same seed draws the same results; a segment no result has draws nothing and records nothing
    again, _ = _sample(tmp_path, "--n", "10", "--seed", "3")
    assert sorted(x["id"] for x in again) == sorted(items)
    empty = runner.invoke(app, ["labels", "sample", "--metric", "toxicity", "--n", "5", "--segment", "app=mail"])
    assert empty.exit_code == 2 and len(empty.output.splitlines()) == 1 and _count(db, "label_draws") == 2


def test_import_stores_idempotently_and_marks_hand_picked(seeded, db, tmp_path):
    from judgeflow.db.labels import labelled_sample

    source, epoch = seeded
    lines, _ = _sample(tmp_path, "--n", "6", "--seed", "11")
    drawn = [x["id"] for x in lines]
    hand = sorted({f"t{i:02}" for i in range(40)} - set(drawn))[0]
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("\n".join([
        json.dumps({**lines[0], "labels": {"toxicity": "fail"}, "note": "ignored"}),
        json.dumps({"id": drawn[1], "labels": {"toxicity": False}}),
        json.dumps({"id": drawn[2], "labels": {"toxicity": None}}),
        json.dumps({"id": hand, "labels": {"toxicity": "yes"}}),
    ]) + "\n")
    for _ in range(2):  # again: the same rows, the latest import's
        result = runner.invoke(app, ["labels", "import", str(labelled)])
        assert result.exit_code == 0, result.output
        assert ("stored 3 label(s): 2 from a draw, 1 hand-picked (stored, not used for correction: not from a "
                "probability sample); skipped 1 null") in result.output
        assert _count(db, "labels") == 3
    assert runner.invoke(app, ["labels", "import", str(labelled), "--labeller", "ann"]).exit_code == 0
    with db.connect() as conn:
        rows = {(r.trace_id, r.labeller): (r.label, r.draw_id) for r in conn.execute(sa.text(
            "SELECT * FROM judgeflow.labels"))}
        [draw] = labelled_sample(conn, source, "toxicity", epoch)
    assert rows[(hand, "")] == (True, None) and rows[(drawn[0], "ann")] == (True, draw.id)
    assert len(rows) == 6
    assert sorted((i.trace_id, i.label, i.labellers) for i in draw.items) == sorted(
        [(drawn[0], True, 2), (drawn[1], False, 2)])


def test_a_broken_file_stores_nothing_and_says_one_line(seeded, db, tmp_path):
    lines, _ = _sample(tmp_path, "--n", "4", "--seed", "5")
    good = json.dumps({"id": lines[0]["id"], "labels": {"toxicity": True}})
    with db.begin() as conn:  # a result of another metric for a drawn id: its draw asked about toxicity only
        conn.execute(sa.text("INSERT INTO judgeflow.eval_results (trace_id, metric, status, passed, source) "
                             "SELECT trace_id, 'hallucination', 'scored', true, source FROM judgeflow.eval_results "
                             "WHERE trace_id = :t AND metric = 'toxicity'"), {"t": lines[1]["id"]})
    cases = {
        "{not json": ":2: not JSON",
        json.dumps({"id": "nobody", "labels": {"toxicity": True}}): "'nobody' was never scored for toxicity",
        json.dumps({"id": lines[1]["id"], "labels": {"toxicity": "maybe"}}): "label 'maybe' is not a label",
        json.dumps({"id": lines[1]["id"], "labels": {"hallucination": True}}): "was drawn to label toxicity, not "
                                                                               "hallucination",
        json.dumps({"id": lines[1]["id"], "labels": {"kindness": True}}): "unknown metric(s) in labels: kindness",
    }
    broken = tmp_path / "broken.jsonl"
    for line, said in cases.items():
        broken.write_text(f"{good}\n{line}\n")
        result = runner.invoke(app, ["labels", "import", str(broken)])
        assert result.exit_code == 2, (line, result.output)
        [printed] = result.output.splitlines()
        assert said in printed and printed.startswith("judgeflow: "), (line, printed)
        assert _count(db, "labels") == 0


def _plan(half_width: str) -> dict:
    result = runner.invoke(app, ["labels", "plan", "--metric", "toxicity", "--half-width", half_width, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_from_the_prior_then_from_the_labels(seeded, tmp_path):
    # no labels: p = .5 in both strata; W = (4, 36 + 3 for t05's weight 4) / 43
    first = _plan("0.05")
    w_f, w_p = 4 / 43, 39 / 43
    total = Z95 ** 2 * (0.5 * w_f + 0.5 * w_p) ** 2 / 0.05 ** 2
    assert {s["stratum"]: s["more"] for s in first["strata"]} == {
        "fail": math.ceil(total * w_f), "pass": math.ceil(total * w_p)}
    assert first["current_half_width"] is None and "Beta(1,1)" in first["prior"]
    lines, _ = _sample(tmp_path, "--n", "8", "--seed", "2")
    labelled = tmp_path / "labelled.jsonl"
    # people say: of the judge's 4 failures 3 fail; of its 4 passes 1 fails
    ones = [x["id"] for x in lines if x["id"] in FAILED][:3] + [x["id"] for x in lines if x["id"] not in FAILED][:1]
    labelled.write_text("".join(json.dumps({"id": x["id"], "labels": {"toxicity": x["id"] in ones}}) + "\n"
                                for x in lines))
    assert runner.invoke(app, ["labels", "import", str(labelled)]).exit_code == 0
    second = _plan("0.05")
    p_f, p_p = (3 + 1) / (4 + 2), (1 + 1) / (4 + 2)
    now = Z95 * math.sqrt(w_f ** 2 * p_f * (1 - p_f) / 4 + w_p ** 2 * p_p * (1 - p_p) / 4)
    assert math.isclose(second["current_half_width"], now)
    s_f, s_p = w_f * math.sqrt(p_f * (1 - p_f)), w_p * math.sqrt(p_p * (1 - p_p))
    total = Z95 ** 2 * (s_f + s_p) ** 2 / 0.05 ** 2
    assert {s["stratum"]: (s["labels"], s["more"]) for s in second["strata"]} == {
        "fail": (4, math.ceil(total * s_f / (s_f + s_p)) - 4), "pass": (4, math.ceil(total * s_p / (s_f + s_p)) - 4)}
    text = runner.invoke(app, ["labels", "plan", "--metric", "toxicity", "--half-width", "0.05"]).output
    assert f"{second['more']} more label(s) for ±0.05 at 95%" in text and "prior: Beta(1,1)" in text
    nothing = runner.invoke(app, ["labels", "plan", "--metric", "hallucination", "--half-width", "0.05"])
    assert nothing.exit_code == 2 and "no scored result of hallucination" in nothing.output


def test_a_session_result_is_written_with_its_key_and_conversation(seeded, db, tmp_path):
    from tests.support.session_rows import seed_session

    source, _ = seeded
    start = BASE_TIME + timedelta(days=2)
    # turn 1 is created first in the source but ordered by created_at: the line keeps turn order
    insert_traces(db, [{"id": f"conversation-7-t{i}", "created_at": start + timedelta(minutes=i),
                        "input": f"user {i}", "output": f"bot {i}"} for i in (2, 0, 1)])
    with db.begin() as conn:
        conn.execute(sa.text("DELETE FROM judgeflow.eval_results"))
        sid = seed_session(conn, source, "conversation-7", start, {"toxicity": [None, None, None]})
        conn.execute(sa.text(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, status, passed, trace_created_at, source) "
            "VALUES (:id, 'toxicity', 'scored', false, :at, :s)"), {"id": sid, "s": source, "at": start})
    lines, _ = _sample(tmp_path, "--n", "5")
    assert lines == [{"id": sid, "session_key": "conversation-7",
                      "conversation": [{"input": f"user {i}", "output": f"bot {i}"} for i in range(3)],
                      "labels": {"toxicity": None}}]


def test_a_metrics_file_metric_is_sampled_and_labelled(seeded, db, tmp_path, monkeypatch):
    metrics = tmp_path / "metrics.toml"
    metrics.write_text('[metrics.helpful]\ncriteria = "the reply helps"\n')
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(metrics))
    source, _ = seeded
    with db.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO judgeflow.eval_results (trace_id, metric, status, passed, trace_created_at, source) "
            "VALUES (:t, 'helpful', 'scored', :p, :at, :s)"),
            [{"t": f"t{i:02}", "p": i > 0, "at": BASE_TIME + timedelta(minutes=i), "s": source} for i in range(10)])
    out = tmp_path / "helpful.jsonl"
    result = runner.invoke(app, ["labels", "sample", "--metric", "helpful", "--n", "4", "--out", str(out)])
    assert result.exit_code == 0 and "fail 1 of 1, pass 3 of 9" in result.output, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {x["id"] for x in lines} >= {"t00"} and all(x["labels"] == {"helpful": None} for x in lines)
    out.write_text("".join(json.dumps({"id": x["id"], "labels": {"helpful": "pass"}}) + "\n" for x in lines))
    imported = runner.invoke(app, ["labels", "import", str(out)])
    assert imported.exit_code == 0 and "stored 4 label(s): 4 from a draw" in imported.output, imported.output
