from datetime import date

from judgeflow.sampling.selection import select


def test_selection_is_deterministic_per_night_and_draws_afresh_the_next():
    ids = [f"t-{i}" for i in range(1000)]
    night = date(2026, 11, 26)
    first = select(ids, 100, night)
    assert len(first) == 100 and select(list(reversed(ids)), 100, night) == first
    assert select(ids, 150, night) >= first  # a larger sample extends the smaller one
    assert select(ids, 100, date(2026, 11, 27)) != first
    assert select(ids, 0, night) == set() and select(ids[:3], 10, night) == set(ids[:3])
