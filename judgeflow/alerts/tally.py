"""A rule's counts per segment value, folded from the lines of one read of the
rollup (judgeflow/db/rollup.py: :func:`read_counts`), as the counting
statements over eval_results counted them: the window and the baseline,
judged and bad results of the judge epoch in force with their sample classes
(what the stratified estimate reads, judgeflow/alerts/estimates.py), failed
scorings, and results of other epochs apart; then the top N values by volume."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable

from judgeflow.alerts.estimates import StratumCounts, WeightedCounts
from judgeflow.db.epochs import Epoch
from judgeflow.db.rollup import CountRow

# (period: '' window or 'base_', the segment value, night, stratum, inclusion probability)
ClassKey = tuple


@dataclass
class Tally:
    """What the counting statements returned for one value (or overall)."""

    samples: int = 0
    bad: int = 0
    failed: int = 0
    base_samples: int = 0
    base_bad: int = 0
    other_epoch: int = 0
    other_base: int = 0
    # per period, value and sample class: [judged, bad] of the epoch in force
    classes: dict[ClassKey, list[int]] = field(default_factory=dict)

    @property
    def volume(self) -> int:
        """Every result of the periods, of any epoch: what values are ranked by."""
        return self.samples + self.base_samples + self.other_epoch + self.other_base

    def add(self, other: "Tally") -> None:
        for name in ("samples", "bad", "failed", "base_samples", "base_bad", "other_epoch", "other_base"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for k, (n, bad) in other.classes.items():
            cell = self.classes.setdefault(k, [0, 0])
            cell[0] += n
            cell[1] += bad

    def period(self, prefix: str) -> WeightedCounts:
        """The period's (``prefix`` '' or 'base_') counts in their sample classes,
        one class per value and (night, stratum, probability), as the results'
        classes were read: the 'other' group keeps each value's classes apart."""
        return WeightedCounts.from_strata([
            StratumCounts(n, bad, k[4]) for k, (n, bad) in sorted(self.classes.items(), key=_class_order)
            if k[0] == prefix and n > 0])


def _class_order(item) -> tuple:
    period, value, night, stratum, prob = item[0]
    return period, value, night is None, night, stratum is None, stratum, prob


def _counted(kind: str, status: str, passed: bool | None) -> tuple[bool, bool]:
    """(counted by the rate, bad) for a rule of ``kind``."""
    if kind == "failure_rate":
        return status in ("scored", "failed"), status == "failed"
    # failed scorings are neither bad nor good; they are reported beside the rate
    return status == "scored", status == "scored" and passed is not True


def _period(row: CountRow, start: datetime, base_start: datetime) -> str | None:
    """'' (window), 'base_' or None (before the baseline) for a line no period boundary cuts."""
    if row.lo >= start:
        return ""
    if row.lo >= base_start and row.hi <= start:
        return "base_"
    if row.hi <= base_start:
        return None
    raise AssertionError(f"a line of [{row.lo}, {row.hi}) straddles a period boundary")


def _add_row(t: Tally, row: CountRow, period: str, kind: str, in_epoch: bool) -> None:
    if not in_epoch:
        name = "other_epoch" if period == "" else "other_base"
        setattr(t, name, getattr(t, name) + row.n)
        return
    counted, bad = _counted(kind, row.status, row.passed)
    if period == "" and row.status == "failed":
        t.failed += row.n
    if not counted:
        return
    setattr(t, f"{period}samples", getattr(t, f"{period}samples") + row.n)
    cell = t.classes.setdefault((period, row.seg_value, *row.sample_class), [0, 0])
    cell[0] += row.n
    if bad:
        setattr(t, f"{period}bad", getattr(t, f"{period}bad") + row.n)
        cell[1] += row.n


def tally(rows: Iterable[CountRow], *, kind: str, metrics: Iterable[str], source: str | None, key: str | None,
          start: datetime, base_start: datetime, epochs: dict[str, Epoch]) -> dict[str, Tally]:
    """Per value of ``key`` ('' overall when ``key`` is None): the counts of one
    rule (``kind``, ``metrics``, ``source``) over its window ``[start, ...)`` and
    baseline ``[base_start, start)``, with ``epochs`` (the source's) in force. A
    value is present when some result of it is in the periods, as in a GROUP BY."""
    wanted, metrics = key or "", set(metrics)
    found: dict[str, Tally] = {}
    for row in rows:
        if row.seg_key != wanted or row.metric not in metrics or row.source not in (source, None) or row.n == 0:
            continue
        period = _period(row, start, base_start)
        if period is None:
            continue
        t = found.get(row.seg_value)
        if t is None:
            t = found[row.seg_value] = Tally()
        _add_row(t, row, period, kind, row.in_epoch(epochs))
    return found


def ranked(found: dict[str, Tally], *, top: int, keep: Iterable[str], other: str
           ) -> list[tuple[str, bool, Tally]]:
    """(value, grouped, counts): the ``top`` values by volume (ties by value) and
    every value in ``keep`` on their own, the rest summed as ``other``
    (grouped True); largest first."""
    keep = set(keep)
    order = sorted(found, key=lambda v: (-found[v].volume, v))
    own = [(v, False, found[v]) for i, v in enumerate(order) if i < top or v in keep]
    rest = [found[v] for i, v in enumerate(order) if not (i < top or v in keep)]
    if rest:
        grouped = Tally()
        for t in rest:
            grouped.add(t)
        own.append((other, True, grouped))
    return sorted(own, key=lambda item: (-item[2].volume, item[0]))
