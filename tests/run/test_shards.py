"""judgeflow/run/shards.py: what a sharded night refuses, its children's names and keys,
and the night's figures from its children's."""

from __future__ import annotations

from datetime import datetime, timezone


from judgeflow.run.shards import ShardReport, lost_note, night_totals, refusal, shard_key, shard_run_name


def test_one_shard_refuses_nothing_and_fewer_than_one_is_refused():
    assert refusal(1, judge_batch=True) is None
    assert refusal(0) == "--shards must be at least 1 (got 0)"


def test_the_batch_api_is_refused_in_one_line():
    line = refusal(2, judge_batch=True)
    assert line is not None and "--batch" in line and "\n" not in line
    assert line.startswith("--shards 2 cannot run with")


def test_unset_values_are_not_refused():
    assert refusal(4, judge_batch=False) is None


def test_a_childs_name_says_the_night_and_the_shard_and_its_key_the_parent():
    night = datetime(2026, 11, 29, 2, 0, tzinfo=timezone.utc)
    assert shard_run_name(night, 2, 4) == "score-new-traces/2026-11-29 shard 2 of 4"
    assert shard_key("parent-a", 2, 4) == shard_key("parent-a", 2, 4)
    keys = {shard_key(parent, shard, 4) for parent in ("parent-a", "parent-b") for shard in range(1, 5)}
    assert len(keys) == 8
    assert shard_run_name(night, 2, 4, takeover=True) == "score-new-traces/2026-11-29 shard 2 of 4 take-over"
    assert shard_key("parent-a", 2, 4, takeover=True) not in keys  # a take-over is a child of its own


def _report(shard, state, statuses, calls, cost, tokens=(0, 0, 0), superseded=0):
    return ShardReport(shard=shard, flow_run_id=f"run-{shard}", state=state, state_name=state.title(),
                       duration_s=12.34, statuses=statuses, judge_calls=calls, cost_usd=cost,
                       tokens=list(tokens), superseded=superseded)


def test_the_nights_figures_are_the_sums_of_its_childrens():
    reports = [_report(1, "COMPLETED", {"scored": 7, "failed": 1}, 16, 0.25, (100, 20, 5)),
               _report(2, "CRASHED", {"scored": 3, "skipped": 2}, 6, 0.125, (40, 8, 0), superseded=1)]
    assert night_totals(reports) == {
        "scored": 10, "skipped": 2, "failed": 1, "superseded": 1, "judge_calls": 22,
        "prompt_tokens": 140, "completion_tokens": 28, "cached_tokens": 5, "cost_usd": 0.375,
    }
    assert [r.lost for r in reports] == [False, True]
    assert reports[0].row(2) == {"shard": "1 of 2", "flow run": "run-1", "state": "Completed", "scored": 7,
                                 "skipped": 0, "failed": 1, "judge calls": 16, "cost usd": 0.25, "time s": 12.3}


def test_a_lost_child_is_named_with_what_it_stored():
    note = lost_note(_report(2, "CRASHED", {"scored": 3}, 6, 0.1), 2)
    assert note.startswith("shard 2 of 2 (flow run run-2) ended Crashed: the 3 result(s) it stored stay")
    assert "take-over run of this shard" in note
    again = ShardReport(shard=2, flow_run_id="run-3", state="CRASHED", state_name="Crashed", duration_s=1.0,
                        takeover=True)
    assert again.row(2)["shard"] == "2 of 2 take-over"
    assert lost_note(again, 2).startswith("take-over of shard 2 of 2 (flow run run-3) ended Crashed")
    assert lost_note(again, 2).endswith("are left pending for the next run")
