"""The order a sampled night is judged in (judgeflow/sampling/order.py): a stop
anywhere leaves in every stratum the same share of its selected traces, a
random one, so the settled weights stay unbiased when the night drifts.

The simulation's seeds (700000+) were written here before it was first run;
its first version (strata a fifth this size, the last quarter at 15%) was too
small for judging oldest first to miss the drift, so the night was made larger
and its drift steeper, on the same seeds."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone

from judgeflow.alerts.estimates import StratumCounts, WeightedCounts, estimate
from judgeflow.sampling.order import rank, ranked
from judgeflow.sampling.selection import select, unit

NIGHT = date(2026, 11, 20)
AT = datetime(2026, 11, 20, tzinfo=timezone.utc)
SEEDS = range(700000, 700300)
# (traffic, selected) per stratum: a large one, a middling one, a small one sampled at its minimum
STRATA = {"app=a": (1500, 300), "app=b": (750, 200), "app=c": (250, 150)}


def test_a_night_is_judged_by_rank_oldest_night_first():
    rows = [(f"t{i}", AT + timedelta(minutes=i), NIGHT, 0.5) for i in range(40)]
    rows += [(f"old{i}", AT - timedelta(days=1), NIGHT - timedelta(days=1), 0.2) for i in range(5)]
    keys = ranked(rows)
    assert [k.id for k in keys[:5]] == sorted((f"old{i}" for i in range(5)),
                                              key=lambda t: unit(t, NIGHT - timedelta(days=1)))
    tonight = [k.id for k in keys[5:]]
    assert tonight == sorted(tonight, key=lambda t: rank(t, NIGHT, 0.5))
    assert tonight != [f"t{i}" for i in range(40)]  # not the order they were created in


def test_every_strata_minimum_comes_first_each_in_rank_order():
    rows = [(f"big{i}", AT, NIGHT, 0.9, "big") for i in range(30)] + [(f"small{i}", AT, NIGHT, 0.1, "small")
                                                                         for i in range(5)]
    keys = [k.id for k in ranked(rows, min_first=3)]
    by_rank = {s: sorted((r[0] for r in rows if r[4] == s), key=lambda t: rank(t, NIGHT, 0.9 if s == "big" else 0.1))
               for s in ("big", "small")}
    assert set(keys[:6]) == set(by_rank["big"][:3] + by_rank["small"][:3])
    for s, order in by_rank.items():
        assert [k for k in keys if k.startswith(s)] == order  # within a stratum: its rank order


def _night(seed: int):
    """One simulated night: failing 3% for the first three quarters, 20% in the
    last; every stratum's traffic spread over the same hour; each selects its
    planned number. Returns (its selected rows, each trace's outcome, each stratum's traces)."""
    rng, night = random.Random(seed), NIGHT + timedelta(days=seed % 300)
    rows, fails, traffic = [], {}, {}
    for name, (n_traffic, n_selected) in STRATA.items():
        ids = [f"{name}-{seed}-{i}" for i in range(n_traffic)]
        for i, t in enumerate(ids):
            fails[t] = rng.random() < (0.20 if i >= 0.75 * n_traffic else 0.03)
        traffic[name] = ids
        chosen = select(ids, n_selected, night)
        rows += [(t, AT + timedelta(seconds=3600 * i / n_traffic), night, n_selected / n_traffic, name)
                 for i, t in enumerate(ids) if t in chosen]
    return rows, fails, traffic


def _stopped(rows, fails, traffic, order: str, stop_share: float, min_first: int = 0):
    """Judge the selection by ``order`` until ``stop_share`` of it is judged (the
    budget runs out), settle, and estimate: (the estimate, the night's true rate, what was judged)."""
    if order == "rank":
        queue = [k.id for k in ranked(rows, min_first)]
    else:
        queue = [r[0] for r in sorted(rows, key=lambda r: r[1])]
    judged = set(queue[: int(stop_share * len(queue))])
    strata = []
    for ids in traffic.values():
        got = [t for t in ids if t in judged]
        # settle: the stratum's judged traces stand for all of its traffic
        strata.append(StratumCounts(len(got), sum(fails[t] for t in got), len(got) / len(ids)))
    truth = sum(fails.values()) / len(fails)
    return estimate(WeightedCounts.from_strata(strata)), truth, judged


def test_a_stop_leaves_every_stratum_the_same_share_of_its_selection():
    rows, fails, traffic = _night(700000)
    _, _, judged = _stopped(rows, fails, traffic, "rank", 0.4)
    for name in STRATA:
        selected = [r[0] for r in rows if r[4] == name]
        share = sum(t in judged for t in selected) / len(selected)
        assert 0.25 < share < 0.55, (name, share)


def test_intervals_cover_the_nights_rate_when_a_stop_cuts_a_night_that_drifts_in_its_last_quarter():
    cover = {"rank": 0, "minimums first": 0, "oldest": 0}
    for seed in SEEDS:
        night = _night(seed)
        for order in cover:
            e, truth, _ = _stopped(*night, "oldest" if order == "oldest" else "rank", 0.4,
                                   min_first=100 if order == "minimums first" else 0)
            cover[order] += e.ci_low <= truth <= e.ci_high
    assert cover["rank"] / len(SEEDS) >= 0.93, cover
    assert cover["minimums first"] / len(SEEDS) >= 0.93, cover
    # judged oldest first, the stop cuts off the drift: the same estimator misses it
    assert cover["oldest"] / len(SEEDS) < 0.6, cover
