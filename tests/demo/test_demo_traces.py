"""The demo traces: shape, timing, reproducibility, and the aggregate behaviour
the demo relies on when scored with the offline judge (day 0 trips the 5%
toxicity alert, earlier days do not)."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone

import pytest

from judgeflow.demo import created_at_for, load_demo_traces, read_demo_rows
from judgeflow.demo.generate_traces import OUT, generate, render

NOW = datetime(2026, 11, 22, 9, 30, tzinfo=timezone.utc)
TOXICITY_RATE_MAX = 0.05  # Settings.toxicity_rate_max's default


@pytest.fixture(scope="module")
def rows():
    return load_demo_traces(NOW)


def test_committed_file_is_what_the_seeded_generator_writes():
    assert OUT.read_text(encoding="utf-8") == render(generate())


def test_rows_have_the_documented_shape(rows):
    assert len(rows) >= 300
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert set(row) == {"id", "created_at", "input", "output", "context", "metadata"}
        assert isinstance(row["input"], str) and row["input"].strip()
        assert isinstance(row["output"], str) and row["output"].strip()
        assert row["context"] is None or (isinstance(row["context"], list) and all(row["context"]))
        meta = row["metadata"]
        assert meta["app"] and meta["kind"]
        label = meta["label"]
        assert isinstance(label["toxic"], bool)
        assert label["hallucination"] in {"faithful", "partial", "unfaithful", None}
        assert (label["hallucination"] is None) == (row["context"] is None)


def test_kinds_are_varied(rows):
    kinds = Counter(row["metadata"]["kind"] for row in rows)
    assert set(kinds) == {"support", "rag_faithful", "rag_partial", "rag_unfaithful", "general", "toxic"}
    assert len({row["output"] for row in rows}) > 0.7 * len(rows)


def test_created_at_is_utc_in_the_past_and_spread_over_seven_days(rows):
    raw = {r["id"]: r for r in read_demo_rows()}
    for row in rows:
        created = row["created_at"]
        assert created.tzinfo is not None and created.utcoffset() == timedelta(0)
        assert created < NOW
        days_ago = raw[row["id"]]["days_ago"]
        assert NOW - timedelta(days=days_ago + 1) < created <= NOW - timedelta(days=days_ago)
    assert {r["days_ago"] for r in raw.values()} == set(range(7))
    assert sum(r["days_ago"] == 0 for r in raw.values()) >= 50
    assert [row["created_at"] for row in rows] == sorted(row["created_at"] for row in rows)


def test_created_at_for_rejects_naive_now_and_bad_times():
    with pytest.raises(ValueError):
        created_at_for(datetime(2026, 11, 22), 0, 1, 1)
    with pytest.raises(ValueError):
        created_at_for(NOW, 7, 0, 0)
    # the latest day is the last 24 hours, whatever the time of day
    assert created_at_for(NOW, 0, 23, 59) < NOW
    assert created_at_for(NOW, 0, 0, 0) > NOW - timedelta(days=1)


def test_labelled_toxic_share_is_high_on_day_0_only(rows):
    raw = {r["id"]: r["days_ago"] for r in read_demo_rows()}
    per_day: dict[int, list[bool]] = defaultdict(list)
    for row in rows:
        per_day[raw[row["id"]]].append(row["metadata"]["label"]["toxic"])
    assert 0.10 <= sum(per_day[0]) / len(per_day[0]) <= 0.16
    for day in range(1, 7):
        assert sum(per_day[day]) / len(per_day[day]) < TOXICITY_RATE_MAX


# --- scored with the offline judge through the real metrics ------------------------


@pytest.fixture(scope="module")
def scored(rows):
    from bench.offline_evaluation import offline_judge
    from judgeflow.metrics.hallucination.metric import HallucinationMetric
    from judgeflow.metrics.toxicity.metric import ToxicityMetric

    judge = offline_judge()
    toxicity = ToxicityMetric(judge, threshold=0.5, async_mode=False)
    hallucination = HallucinationMetric(judge, threshold=0.5)
    out = []
    for row in rows:
        out.append(
            (
                row,
                toxicity.score(row["input"], row["output"]),
                hallucination.score(row["input"], row["output"], row["context"]),
            )
        )
    return out


def test_offline_toxicity_fail_rate_trips_the_alert_on_day_0_only(scored):
    per_day: dict[int, list[bool]] = defaultdict(list)
    for row, tox, _ in scored:
        day = (NOW - row["created_at"]) // timedelta(days=1)
        assert tox.status == "scored" and tox.judge_model.startswith("offline/")
        per_day[day].append(tox.passed is False)
    assert sorted(per_day) == list(range(7))
    assert sum(per_day[0]) / len(per_day[0]) > TOXICITY_RATE_MAX
    for day in range(1, 7):
        assert sum(per_day[day]) / len(per_day[day]) < TOXICITY_RATE_MAX, day


def test_offline_toxicity_agrees_with_the_labels(scored):
    agree = sum((tox.passed is False) == row["metadata"]["label"]["toxic"] for row, tox, _ in scored)
    assert agree / len(scored) >= 0.97


def test_offline_hallucination_fails_partial_and_unfaithful_answers(scored):
    """The seed's scale: 0 or 1, so an answer with one wrong number or name
    (partial) fails like an unfaithful one, and a faithful one passes."""
    scores: dict[str | None, list] = defaultdict(list)
    for row, _, hal in scored:
        label = row["metadata"]["label"]["hallucination"]
        if label is None:
            assert hal.status == "skipped" and hal.score is None  # the judge abstains without context
        else:
            assert hal.status == "scored"
            scores[label].append(hal.score)
    assert all(value in (0.0, 1.0) for values in scores.values() for value in values)
    failed = {label: sum(s > 0.5 for s in values) / len(values) for label, values in scores.items()}
    assert failed["faithful"] <= 0.05
    assert failed["partial"] >= 0.8 and failed["unfaithful"] >= 0.8
